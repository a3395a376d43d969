package allocation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

// TestInsertBatched races many Store.Insert calls, so that they share
// batch statements, among them a name taken twice, a uuid a node holds
// as its instance and rows with and without names, owners and traits:
// every call gets its own outcome, as it would alone, and every stored row
// is exactly what its call asked for.
func TestInsertBatched(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	held := uuid.New()
	_, err := f.pool.Exec(ctx, `INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, instance_uuid)
		VALUES (gen_random_uuid(), 'holder', 'fake-hardware', 'gold', 'active', 'power on', $1)`, held)
	require.NoError(t, err)
	s := NewStore(f.pool)

	const n = 120
	params := make([]CreateAllocationParams, n)
	for i := range params {
		p := CreateAllocationParams{Uuid: uuid.New(), ResourceClass: fmt.Sprintf("rc-%d", i%3),
			Extra: []byte(fmt.Sprintf(`{"i": %d}`, i)), State: StateAllocating, Traits: []string{}}
		if i%2 == 0 {
			name := fmt.Sprintf("a-%d", i)
			p.Name = &name
		}
		if i%5 == 0 {
			owner := fmt.Sprintf("project-%d", i)
			p.Owner = &owner
		}
		for k := range i % 4 {
			p.Traits = append(p.Traits, fmt.Sprintf("CUSTOM_T%d", k))
		}
		params[i] = p
	}
	dup := "twice"
	params[7].Name, params[9].Name = &dup, &dup
	params[11].Uuid = held
	params[13].Extra = []byte(`{"nul": "\u0000"}`) // jsonb refuses it: only this one fails

	// The notifications of the 'created' events (migration 00038: one
	// statement-level trigger per batch statement).
	lc, err := f.pool.Acquire(ctx)
	require.NoError(t, err)
	defer lc.Release()
	_, err = lc.Exec(ctx, `LISTEN metalloc_allocation_events`)
	require.NoError(t, err)

	rows := make([]CreateAllocationRow, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range params {
		wg.Go(func() {
			<-start
			rows[i], errs[i] = s.Insert(ctx, params[i])
		})
	}
	close(start)
	wg.Wait()

	status := func(err error) int {
		var apiErr *web.Error
		if errors.As(err, &apiErr) {
			return apiErr.Status
		}
		return 0
	}
	require.Equal(t, http.StatusConflict, status(errs[11]), "uuid held by a node: %v", errs[11])
	require.Contains(t, errs[11].Error(), "is already associated with a node")
	require.True(t, (errs[7] == nil) != (errs[9] == nil), "one of the two names wins: %v, %v", errs[7], errs[9])
	require.Error(t, errs[13])
	_, isData := db.DataException(errs[13])
	require.True(t, isData, "the refused value is a data exception: %v", errs[13])
	for i, err := range errs {
		if i == 13 {
			continue
		}
		if i == 11 || ((i == 7 || i == 9) && err != nil) {
			if i != 11 {
				require.Equal(t, http.StatusConflict, status(err))
				require.Contains(t, err.Error(), "An allocation with name twice already exists")
			}
			continue
		}
		require.NoError(t, err, "insert %d", i)
		p, row := params[i], rows[i]
		require.Equal(t, p.Uuid, row.Uuid)
		require.Equal(t, p.Name, row.Name)
		require.Equal(t, p.Owner, row.Owner)
		require.Equal(t, p.ResourceClass, row.ResourceClass)
		require.EqualValues(t, StateAllocating, row.State)
		require.JSONEq(t, string(p.Extra), string(row.Extra))
		v := f.get(row.ID)
		got := slices.Clone(v.Traits)
		slices.Sort(got)
		require.Equal(t, p.Traits, got, "traits of insert %d", i)
	}
	var stored int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM allocations`).Scan(&stored))
	require.Equal(t, n-3, stored)

	// Every stored allocation has one 'created' event, with its fields, and
	// the events of one INSERT (one transaction: xmin) are in the order of
	// its allocations' ids. Across concurrent INSERTs there is no order to
	// keep: each statement's trigger runs when that statement ends.
	var mismatched, unordered, events int
	require.NoError(t, f.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE a.id IS NULL OR e.kind <> 'created' OR e.state <> a.state
		                          OR e.name IS DISTINCT FROM a.name OR e.owner IS DISTINCT FROM a.owner
		                          OR e.resource_class <> a.resource_class OR e.node_uuid IS NOT NULL),
		       count(*) FILTER (WHERE e.id < lag_event), count(*)
		  FROM (SELECT e.*, lag(e.id) OVER (PARTITION BY a.xmin::text ORDER BY a.id) AS lag_event
		          FROM allocation_events e LEFT JOIN allocations a ON a.uuid = e.allocation_uuid) e
		  LEFT JOIN allocations a ON a.uuid = e.allocation_uuid`).Scan(&mismatched, &unordered, &events))
	require.Equal(t, n-3, events)
	require.Zero(t, mismatched)
	require.Zero(t, unordered)

	// One notification '<uuid> allocating' per stored allocation, none for
	// the refused ones.
	seen := map[string]int{}
	for len(seen) < n-3 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		note, err := lc.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "notifications so far: %d", len(seen))
		seen[note.Payload]++
	}
	for i, row := range rows {
		if errs[i] == nil {
			require.Equal(t, 1, seen[row.Uuid.String()+" allocating"], "insert %d", i)
		}
	}
}

// TestInsertOutcomeUnknown: an insert whose connection broke after the
// statement was sent may have committed; Store.Insert then looks the uuid
// up (confirmInsert), and a row that is there is answered as inserted.
// Failures that stored nothing are not looked up.
func TestInsertOutcomeUnknown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := NewStore(f.pool)
	p := CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "gold", Extra: []byte(`{}`), State: StateAllocating, Traits: []string{}}
	row, err := s.Insert(ctx, p)
	require.NoError(t, err)

	found, ok := s.confirmInsert(ctx, p.Uuid)
	require.True(t, ok)
	require.Equal(t, row, found)
	_, ok = s.confirmInsert(ctx, uuid.New())
	require.False(t, ok, "nothing stored")

	terminated := fmt.Errorf("creating allocation: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"})
	require.True(t, maybeCommitted(terminated))
	require.True(t, maybeCommitted(fmt.Errorf("creating allocation: %w", io.ErrUnexpectedEOF)))
	require.False(t, maybeCommitted(&pgconn.ConnectError{}), "never connected")
	require.False(t, maybeCommitted(fmt.Errorf("acquiring: %w", context.DeadlineExceeded)), "no connection in time")
	require.False(t, maybeCommitted(&pgconn.PgError{Code: "23505"}), "refused: nothing stored")
}
