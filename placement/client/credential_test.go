package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/placement/client"
)

// fakeSource issues "tok-1", "tok-2", … : a new token after each Invalidate.
type fakeSource struct{ n, issued atomic.Int64 }

func (f *fakeSource) ServiceToken(context.Context) (string, error) {
	f.issued.Add(1)
	return "tok-" + string(rune('0'+f.n.Load()+1)), nil
}
func (f *fakeSource) Invalidate() { f.n.Add(1) }

// TestCredentials: a Keystone credential re-authenticates once after a 401
// (a revoked token) and the request succeeds; Basic sends Authorization;
// a fixed Token is not retried.
func TestCredentials(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		u, p, basic := r.BasicAuth()
		switch {
		case r.Header.Get("X-Auth-Token") == "tok-2", basic && u == "metalloc" && p == "s3cret":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"uuid":"` + uuid.Nil.String() + `","name":"n","generation":1}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := t.Context()

	src := &fakeSource{}
	_, err := client.NewWithCredential(srv.URL, client.Keystone{Source: src}, srv.Client()).GetProvider(ctx, uuid.Nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "one 401 with tok-1, then tok-2")

	_, err = client.NewWithCredential(srv.URL, client.Basic{User: "metalloc", Password: "s3cret"}, srv.Client()).GetProvider(ctx, uuid.Nil)
	require.NoError(t, err)

	calls.Store(0)
	_, err = client.NewWithCredential(srv.URL, client.Basic{User: "metalloc", Password: "wrong"}, srv.Client()).GetProvider(ctx, uuid.Nil)
	require.Equal(t, http.StatusUnauthorized, client.StatusOf(err))
	_, err = client.New(srv.URL, "admin", 0).GetProvider(ctx, uuid.Nil)
	require.Equal(t, http.StatusUnauthorized, client.StatusOf(err))
	require.EqualValues(t, 2, calls.Load(), "no retry for fixed credentials")
}
