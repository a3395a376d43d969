package dbtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

func TestNewIsolatedMigratedDatabases(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			var n int
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM nodes").Scan(&n))
			require.Zero(t, n)
			// Each database is private: a row written here is invisible to
			// the sibling subtest.
			_, err := pool.Exec(t.Context(), "CREATE TABLE scratch (x int)")
			require.NoError(t, err)
		})
	}
}
