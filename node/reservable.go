package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db"
)

// SetReservable puts the nodes named by idents (uuids or names) into the
// pool leases take from (on true) or back on demand (false), all or none:
// an ident naming no node is an error naming it and nothing changes. It
// returns how many nodes changed (idents naming the same node count once).
// metalloc's own (leases, issue 43; Blazar keeps its "freepool" in its own
// database); the CLI's `metalloc-manage node set-reservable`.
func (s *Store) SetReservable(ctx context.Context, idents []string, on bool) (int, error) {
	var uuids []uuid.UUID
	var names []string
	for _, id := range idents {
		if u, err := uuid.Parse(id); err == nil {
			uuids = append(uuids, u)
		} else {
			names = append(names, id)
		}
	}
	n := 0
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := s.q.WithTx(tx).SetNodesReservable(ctx, SetNodesReservableParams{Reservable: on, Uuids: uuids, Names: names})
		if err != nil {
			return err
		}
		found := map[string]bool{}
		for _, r := range rows {
			found[r.Uuid.String()] = true
			if r.Name != nil {
				found[*r.Name] = true
			}
		}
		var missing []string
		for _, id := range idents {
			if u, err := uuid.Parse(id); err == nil {
				id = u.String()
			}
			if !found[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: %s (nothing changed)", ErrNotFound, strings.Join(missing, ", "))
		}
		n = len(rows)
		return nil
	})
	return n, err
}
