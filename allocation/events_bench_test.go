package allocation

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/db/dbtest"
)

// BenchmarkAllocationEvents measures what the event log costs one
// allocation's life (create, reserve, delete: three events), with the
// triggers on (and the hub's numbering, once per allocation: the worst
// case, a busy API numbers many at once) and off, interleaved in one run:
//
//	go test ./allocation -run XXX -bench AllocationEvents -benchtime 2000x
func BenchmarkAllocationEvents(b *testing.B) {
	pool := dbtest.New(b)
	ctx := context.Background()
	q := New(pool)
	dbtest.Nodes(b, pool, 20, "gold")
	var me int64
	if err := pool.QueryRow(ctx, `INSERT INTO conductors (hostname) VALUES ('bench') RETURNING id`).Scan(&me); err != nil {
		b.Fatal(err)
	}
	life := func(b *testing.B, events bool) {
		row, err := q.CreateAllocation(ctx, CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "gold",
			Extra: []byte("{}"), State: StateAllocating, Traits: []string{}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE allocations SET conductor_affinity = $1 WHERE id = $2`, me, row.ID); err != nil {
			b.Fatal(err)
		}
		var reserved bool
		if err := pool.QueryRow(ctx, `SELECT reserved FROM metalloc_reserve($1, $2, 'gold', '{}', NULL, NULL, NULL)`,
			row.ID, me).Scan(&reserved); err != nil || !reserved {
			b.Fatal(err, reserved)
		}
		if err := q.Deallocate(ctx, row.ID); err != nil {
			b.Fatal(err)
		}
		if events {
			if _, err := q.SequenceEvents(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, events := range []bool{false, true, false, true} {
		verb := "DISABLE"
		if events {
			verb = "ENABLE"
		}
		for _, trg := range []string{"allocations_event", "allocations_event_state"} {
			if _, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE allocations %s TRIGGER %s", verb, trg)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("events=%v", events), func(b *testing.B) {
			for b.Loop() {
				life(b, events)
			}
		})
	}
}
