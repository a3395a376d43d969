package allocation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestViewCacheRules: what a notification does to an entry, and that a
// read is kept only if nothing was notified since it began.
func TestViewCacheRules(t *testing.T) {
	t.Parallel()
	c := newViewCache(3)
	u := uuid.New()
	allocating := View{Allocation: Allocation{Uuid: u, State: StateAllocating}}

	// Not listening: nothing is cached.
	require.Zero(t, c.begin(u))
	c.fill(0, allocating)
	_, ok := c.get(u)
	require.False(t, ok)

	c.setLive(true)
	gen := c.begin(u)
	c.notified(u.String() + " allocating") // its creation: keeps the open entry
	c.fill(gen, allocating)
	v, ok := c.get(u)
	require.True(t, ok)
	require.Equal(t, StateAllocating, v.State)

	// A reservation updates it from the payload.
	node := uuid.New()
	c.notified(fmt.Sprintf("%s active %s %d", u, node, int64(1764201600123456)))
	v, ok = c.get(u)
	require.True(t, ok)
	require.Equal(t, StateActive, v.State)
	require.Equal(t, node, *v.NodeUUID)
	require.Equal(t, time.UnixMicro(1764201600123456).UTC(), *v.UpdatedAt)

	// Any other change removes it: name or extra, deletion, failure.
	for _, p := range []string{" active *", " deleted", " error"} {
		gen := c.begin(u)
		c.fill(gen, v)
		_, ok = c.get(u)
		require.True(t, ok)
		c.notified(u.String() + p)
		_, ok = c.get(u)
		require.False(t, ok, p)
	}

	// A change notified while a read is under way: the read is not kept.
	gen = c.begin(u)
	c.notified(u.String() + " deleted")
	c.fill(gen, v)
	_, ok = c.get(u)
	require.False(t, ok)

	// A reservation notified while the read (or the insert) that opened
	// the entry is under way: kept, and applied to what the read found
	// still allocating; to a read that found it reserved already, it
	// changes nothing.
	for _, read := range []View{allocating, v} {
		gen = c.begin(u)
		c.notified(u.String() + " allocating")
		c.notified(fmt.Sprintf("%s active %s %d", u, node, int64(1764201600123456)))
		c.fill(gen, read)
		got, ok := c.get(u)
		require.True(t, ok)
		require.Equal(t, v, got)
	}
	// ... but not when anything else was notified after it.
	gen = c.begin(u)
	c.notified(fmt.Sprintf("%s active %s %d", u, node, int64(1764201600123456)))
	c.notified(u.String() + " deleted")
	c.fill(gen, allocating)
	_, ok = c.get(u)
	require.False(t, ok)
	gen = c.begin(u)
	c.notified(fmt.Sprintf("%s active %s %d", u, node, int64(1764201600123456)))
	c.notified(fmt.Sprintf("%s active %s %d", u, node, int64(1764201600123457)))
	c.fill(gen, allocating)
	_, ok = c.get(u)
	require.False(t, ok, "two reservations: not the one allocation's single change")

	// The listener lost: nothing is served; reconnected: empty.
	gen = c.begin(u)
	c.fill(gen, v)
	c.setLive(false)
	_, ok = c.get(u)
	require.False(t, ok)
	c.setLive(true)
	_, ok = c.get(u)
	require.False(t, ok)

	// Bounded: the oldest entries go.
	var us []uuid.UUID
	for range 5 {
		x := uuid.New()
		us = append(us, x)
		c.fill(c.begin(x), View{Allocation: Allocation{Uuid: x, State: StateActive}})
	}
	_, ok = c.get(us[0])
	require.False(t, ok)
	_, ok = c.get(us[4])
	require.True(t, ok)
}

// TestCachedGetFollowsChanges: GETs answered from the hub's cache follow
// what other processes change (here: SQL on the database): the
// reservation (from the notification's payload, no read), a rename, a
// deletion; the answers are the documents a read gives.
func TestCachedGetFollowsChanges(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	w.node("n1", "gold", "CUSTOM_A", "CUSTOM_B")
	dbtest.WaitFor(t, 30*time.Second, "the hub to listen", func() bool { return w.hub.cache.isLive() })
	resp, created := w.request("POST", "/v1/allocations", nil, `{"name": "a1", "resource_class": "gold", "extra": {"k": "v"}, "traits": ["CUSTOM_B", "CUSTOM_A"]}`)
	require.Equal(t, 201, resp.StatusCode, created)
	u := created["uuid"].(string)
	hits, _ := w.hub.CacheStats()
	_, got := w.request("GET", "/v1/allocations/"+u, nil, "")
	require.Equal(t, created, got)
	h, _ := w.hub.CacheStats()
	require.Equal(t, hits+1, h, "answered from the cache")
	_, byName := w.request("GET", "/v1/allocations/a1", nil, "")
	require.Equal(t, byName, got, "what a read gives")

	// Reserved by a conductor: the cached document follows.
	w.activate("a1")
	// What a read gives (the cache is bypassed: a GET by name).
	read := func() map[string]any {
		var name string
		require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT name FROM allocations WHERE uuid = $1`, u).Scan(&name))
		_, got := w.request("GET", "/v1/allocations/"+name, nil, "")
		return got
	}
	want := read()
	require.Equal(t, "active", want["state"])
	dbtest.WaitFor(t, 30*time.Second, "the reservation in the cached answer", func() bool {
		_, got := w.request("GET", "/v1/allocations/"+u, nil, "")
		return got["state"] == "active"
	})
	_, got = w.request("GET", "/v1/allocations/"+u, nil, "")
	require.Equal(t, want, got)

	// Renamed and deleted elsewhere.
	_, err := w.pool.Exec(context.Background(), `UPDATE allocations SET name = 'b1', updated_at = now() WHERE uuid = $1`, u)
	require.NoError(t, err)
	dbtest.WaitFor(t, 30*time.Second, "the rename", func() bool {
		_, got := w.request("GET", "/v1/allocations/"+u, nil, "")
		return got["name"] == "b1"
	})
	_, got = w.request("GET", "/v1/allocations/"+u, nil, "")
	require.Equal(t, read(), got)
	_, err = w.pool.Exec(context.Background(), `SELECT metalloc_deallocate(id) FROM allocations WHERE uuid = $1`, u)
	require.NoError(t, err)
	dbtest.WaitFor(t, 30*time.Second, "the deletion", func() bool {
		resp, _ := w.request("GET", "/v1/allocations/"+u, nil, "")
		return resp.StatusCode == 404
	})
}

func (c *viewCache) isLive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}
