package dbtest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PlanLog is a connection of its own (its own plans) that logs the plan
// of every statement it runs (auto_explain's JSON documents, as notices
// to the client), for the tests that check what a session's plans look
// like (conductor/backend's TestClaimPlansIgnoreNodeStatistics, lease's
// TestLeaseReadPlansSetBased): their shapes, never their times.
type PlanLog struct {
	// Conn is the session; run statements on it.
	Conn *pgx.Conn
	t    testing.TB
	mu   sync.Mutex
	// plans are auto_explain's JSON documents, in order.
	plans []string
}

// NewPlanLog opens a PlanLog on the database at url (closed when the test
// ends) and sets settings ("auto_explain.log_nested_statements = on",
// "plan_cache_mode = force_generic_plan", ...) after auto_explain's own:
// every statement logged, as JSON, at level notice.
func NewPlanLog(t testing.TB, url string, settings ...string) *PlanLog {
	t.Helper()
	l := &PlanLog{t: t}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if i := strings.Index(n.Message, "{"); i >= 0 && strings.Contains(n.Message, "plan:") {
			l.mu.Lock()
			l.plans = append(l.plans, n.Message[i:])
			l.mu.Unlock()
		}
	}
	if l.Conn, err = pgx.ConnectConfig(context.Background(), cfg); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { l.Conn.Close(context.Background()) })
	l.Exec(`LOAD 'auto_explain'`)
	for _, s := range append([]string{"auto_explain.log_min_duration = 0", "auto_explain.log_format = json",
		"auto_explain.log_level = notice"}, settings...) {
		l.Exec("SET " + s)
	}
	return l
}

// Exec runs sql on the session; an error fails the test.
func (l *PlanLog) Exec(sql string, args ...any) {
	l.t.Helper()
	if _, err := l.Conn.Exec(context.Background(), sql, args...); err != nil {
		l.t.Fatalf("dbtest: %s: %v", sql, err)
	}
}

// Plans returns the plans logged since the last Reset, in order.
func (l *PlanLog) Plans() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.plans)
}

// Reset forgets the plans logged so far.
func (l *PlanLog) Reset() {
	l.mu.Lock()
	l.plans = nil
	l.mu.Unlock()
}
