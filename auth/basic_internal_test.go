package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
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

// TestHTTPBasicDummyCost: the dummy hash compared for unknown users has
// the highest cost of the file's entries (with the median, an unknown user
// answered 90 times faster than a cost-12 user's wrong password), and its
// making is the first measure of how long a failure takes.
func TestHTTPBasicDummyCost(t *testing.T) {
	t.Parallel()
	b := basicFile(t, map[string]int{"a": bcrypt.MinCost, "b": bcrypt.MinCost, "c": bcrypt.MinCost + 2})
	cost, err := bcrypt.Cost(b.dummy)
	require.NoError(t, err)
	require.Equal(t, bcrypt.MinCost+2, cost)
	require.Positive(t, b.compared[0])
	require.Equal(t, b.compared[0], slices.Min(b.compared[:]), "every measure is the first one")

	b = basicFile(t, map[string]int{"a": bcrypt.MinCost})
	cost, err = bcrypt.Cost(b.dummy)
	require.NoError(t, err)
	require.Equal(t, bcrypt.MinCost, cost)
}

// TestHTTPBasicBusy: beyond the comparisons running and waiting at a time
// in its budget, a check that needs one is refused at once with 503 and
// Retry-After; credentials verified before still pass without one. A
// known user with no recent failure has the clean budget, anyone else the
// suspect one; an unknown name with no recent failure is answered 401
// without a comparison when the suspect budget is full (a 503 there would
// tell it from a known name).
func TestHTTPBasicBusy(t *testing.T) {
	t.Parallel()
	b := basicFile(t, map[string]int{"alice": bcrypt.MinCost, "bob": bcrypt.MinCost})
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

	// Every comparison slot and every place in the clean queue taken.
	for range cap(b.clean.queue) {
		b.clean.queue <- struct{}{}
	}
	st, hdr := call("bob", "x")
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Equal(t, "Too many authentication attempts in progress; retry later.", failed.Message)
	st, _ = call("alice", "alice-pw")
	require.Equal(t, http.StatusOK, st, "verified credentials need no comparison")
	st, _ = call("mallory", "x")
	require.Equal(t, http.StatusUnauthorized, st, "unknown users have the suspect budget")
	st, _ = call("bob", "x")
	require.Equal(t, http.StatusServiceUnavailable, st, "a refusal is no failure")
	for range cap(b.clean.queue) {
		<-b.clean.queue
	}

	// bob fails once: his checks move to the suspect budget.
	st, _ = call("bob", "wrong")
	require.Equal(t, http.StatusUnauthorized, st)
	st, _ = call("bob", "wrong")
	require.Equal(t, http.StatusUnauthorized, st, "known bad: no comparison, no budget")
	for range cap(b.suspect.queue) {
		b.suspect.queue <- struct{}{}
	}
	st, _ = call("bob", "bob-pw")
	require.Equal(t, http.StatusServiceUnavailable, st)
	st, _ = call("eve", "x")
	require.Equal(t, http.StatusUnauthorized, st, "a new unknown name fails as a new known name would")
	st, _ = call("eve", "y")
	require.Equal(t, http.StatusServiceUnavailable, st, "an unknown name that failed is refused as bob is")
	st, _ = call("carol", "x")
	require.Equal(t, http.StatusUnauthorized, st)

	// A place frees up: checks run again.
	<-b.suspect.queue
	st, _ = call("bob", "bob-pw")
	require.Equal(t, http.StatusOK, st)

	// Waiting for a slot ends with the request.
	for range cap(b.suspect.slots) {
		b.suspect.slots <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.compare(ctx, b.suspect, b.dummy, []byte("x"))
	require.ErrorIs(t, err, context.Canceled)
}
