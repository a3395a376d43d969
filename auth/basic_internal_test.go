package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// basicFile writes an htpasswd file of user:password pairs hashed at the
// given costs and loads it.
func basicFile(t *testing.T, entries map[string]int) *HTTPBasic {
	t.Helper()
	var s string
	for user, cost := range entries {
		h, err := bcrypt.GenerateFromPassword([]byte(user+"-pw"), cost)
		require.NoError(t, err)
		s += user + ":" + string(h) + "\n"
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
	b, err := NewHTTPBasic(path, zap.NewNop())
	require.NoError(t, err)
	return b
}

// TestHTTPBasicDummyCost: an unknown user costs what a wrong password
// costs: the dummy hash has the median cost of the file's entries
// (htpasswd -B writes cost 5; a cost-10 dummy made unknown users 40 times
// slower, which told which users exist).
func TestHTTPBasicDummyCost(t *testing.T) {
	t.Parallel()
	b := basicFile(t, map[string]int{"a": bcrypt.MinCost, "b": bcrypt.MinCost + 1, "c": bcrypt.MinCost + 2})
	cost, err := bcrypt.Cost(b.dummy)
	require.NoError(t, err)
	require.Equal(t, bcrypt.MinCost+1, cost)

	b = basicFile(t, map[string]int{"a": bcrypt.MinCost})
	cost, err = bcrypt.Cost(b.dummy)
	require.NoError(t, err)
	require.Equal(t, bcrypt.MinCost, cost)
}

// TestHTTPBasicBusy: beyond the comparisons running and waiting at a time,
// a request that needs one is refused at once with 503 and Retry-After;
// credentials verified before still pass without one.
func TestHTTPBasicBusy(t *testing.T) {
	t.Parallel()
	b := basicFile(t, map[string]int{"alice": bcrypt.MinCost})
	e := echo.New()
	var failed *Failure
	mw := Middleware(b, nil, func(_ echo.Context, f *Failure) error {
		failed = f
		return echo.NewHTTPError(f.Status, f.Message)
	})
	call := func(user, pw string) (int, http.Header) {
		failed = nil
		r := httptest.NewRequest(http.MethodGet, "/v1/nodes", nil)
		r.SetBasicAuth(user, pw)
		rec := httptest.NewRecorder()
		err := mw(func(c echo.Context) error { return c.NoContent(http.StatusOK) })(e.NewContext(r, rec))
		if he, ok := err.(*echo.HTTPError); ok {
			return he.Code, rec.Header()
		}
		require.NoError(t, err)
		return rec.Code, rec.Header()
	}
	st, _ := call("alice", "alice-pw")
	require.Equal(t, http.StatusOK, st)

	// Every comparison slot and every place in the queue taken.
	for range cap(b.queue) {
		b.queue <- struct{}{}
	}
	st, hdr := call("mallory", "x")
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Equal(t, "Too many authentication attempts in progress; retry later.", failed.Message)
	st, _ = call("alice", "wrong")
	require.Equal(t, http.StatusServiceUnavailable, st)
	st, _ = call("alice", "alice-pw")
	require.Equal(t, http.StatusOK, st, "verified credentials need no comparison")

	// A place frees up: checks run again.
	<-b.queue
	st, _ = call("mallory", "x")
	require.Equal(t, http.StatusUnauthorized, st)

	// Waiting for a slot ends with the request.
	for range cap(b.slots) {
		b.slots <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.compare(ctx, b.dummy, []byte("x"))
	require.ErrorIs(t, err, context.Canceled)
}
