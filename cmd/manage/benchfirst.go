package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
)

// firstBurstCases are what bench first-burst can do between the enrolment
// and the burst (issue 44's table): nothing (then the same burst again
// --later after the enrolment), VACUUM the node tables, ANALYZE.
var firstBurstCases = map[string]struct {
	label, sql string
}{
	"none":    {"nothing else done (what a user gets)", ""},
	"vacuum":  {"`VACUUM nodes; VACUUM node_traits` first", "VACUUM nodes, node_traits"},
	"analyze": {"`ANALYZE` first", "ANALYZE"},
}

// firstBurstRow is one line of bench first-burst's table.
type firstBurstRow struct {
	label string
	r     loadgen.Result
	// stats says how old the node tables' statistics were at the burst.
	stats string
}

// firstBurstCmd is `metalloc-manage bench first-burst` (make bench
// MODE=first-burst): issue 44's scenario. For every case of --cases, on a
// database of its own created on DATABASE_URL's server (migrated, its node
// tables analyzed while empty, dropped at the end), it starts the API and
// --conductors conductors, enrolls --nodes nodes through the API as
// Ironic's clients do (loadgen.EnrollIronic: one class, three traits on
// every node, every state change waited for, then the class listed) and at
// once sends --allocations allocations in a burst (loadgen.ModeBurst);
// with case none the same burst again --later after the enrolment ended,
// on the same fleet. It prints issue 44's table: allocations/s and client
// p99 per case, and the first burst's rate as a share of the later one's.
func firstBurstCmd() *cobra.Command {
	var nodes, allocations, concurrency, conductors, rounds int
	var later, timeout time.Duration
	var cases string
	var statements bool
	c := &cobra.Command{
		Use:   "first-burst",
		Short: "issue 44's scenario: a burst of allocations right after enrolling through the API, against the same burst later",
		Long: "For every case of --cases (none, vacuum, analyze), --rounds times, on a fresh database of its own\n" +
			"created on DATABASE_URL's server: starts metalloc-api and --conductors conductors, enrolls --nodes\n" +
			"nodes through the API as Ironic's clients do (node create in one resource class, three traits,\n" +
			"manage, power off, provide, each waited for by GETs, then the class listed, 1,000 a page), then at\n" +
			"once --allocations allocations in a burst from --concurrency clients (resource class and one of the\n" +
			"traits each; one event stream says when each finished). Case vacuum runs VACUUM on the node tables\n" +
			"before the burst, analyze ANALYZE; none runs nothing, then the same burst again --later after the\n" +
			"enrolment ended. Prints allocations/s and client p99 per case and the first burst as a share of the\n" +
			"later one. The node tables are analyzed while empty before the enrolment, as on a database that\n" +
			"was analyzed before its fleet was enrolled. Needs a role that may create databases.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			kinds := strings.Split(cases, ",")
			for _, k := range kinds {
				if _, ok := firstBurstCases[k]; !ok {
					return fmt.Errorf("--cases: unknown case %q (none, vacuum or analyze)", k)
				}
			}
			if allocations*2 > nodes && slices.Contains(kinds, "none") && later > 0 {
				return fmt.Errorf("--allocations %d: the two bursts of case none need %d nodes, --nodes is %d", allocations, 2*allocations, nodes)
			}
			o := loadgen.Options{
				Nodes: nodes, Allocations: allocations, Concurrency: concurrency,
				Enroll: loadgen.EnrollIronic, Mode: loadgen.ModeBurst, SkipDeletes: true, Log: log, Timeout: timeout,
				Progress: func(phase string, done, total int) {
					log.Info("progress", zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
				},
			}
			var rows []firstBurstRow
			for round := 1; round <= rounds; round++ {
				for _, k := range kinds {
					log.Info("first-burst case", zap.Int("round", round), zap.String("case", k))
					rs, err := firstBurstCase(ctx, cfg.Database.URL, o, k, conductors, later, statements, log)
					if ctx.Err() != nil {
						return context.Cause(ctx)
					}
					if err != nil {
						return fmt.Errorf("round %d, case %s: %w", round, k, err)
					}
					if rounds > 1 {
						for i := range rs {
							rs[i].label += fmt.Sprintf(" (round %d)", round)
						}
					}
					rows = append(rows, rs...)
				}
			}
			fmt.Print(firstBurstTable(o, conductors, later, rows))
			for _, r := range rows {
				if r.r.DoubleBooked > 0 {
					return fmt.Errorf("%s: %d nodes double-booked", r.label, r.r.DoubleBooked)
				}
			}
			return nil
		},
	}
	c.Flags().IntVar(&nodes, "nodes", 10000, "nodes to enroll through the API in every case")
	c.Flags().IntVar(&allocations, "allocations", 3000, "allocations in each burst")
	c.Flags().IntVar(&concurrency, "concurrency", 32, "clients enrolling, and clients of the burst")
	c.Flags().IntVar(&conductors, "conductors", 2, "conductors to start")
	c.Flags().IntVar(&rounds, "rounds", 1, "times every case runs (interleaved: none, vacuum, analyze, none, ...)")
	c.Flags().DurationVar(&later, "later", 70*time.Second, "with case none, the second burst starts this long after the enrolment ended (0: none)")
	c.Flags().BoolVar(&statements, "statements", false, "log the statements that took most time in each burst (pg_stat_statements; needs shared_preload_libraries=pg_stat_statements, e.g. dev exec --pg-setting)")
	c.Flags().DurationVar(&timeout, "timeout", time.Hour, "bound on each phase (the enrolment of 100,000 nodes takes about half an hour on 2 cores)")
	c.Flags().StringVar(&cases, "cases", "none,vacuum,analyze", "what runs between the enrolment and the burst, comma-separated: none, vacuum, analyze")
	return c
}

// firstBurstCase runs case kind on a database of its own, created on the
// server of baseURL and dropped afterwards, and returns its rows (two for
// case none with later > 0).
func firstBurstCase(ctx context.Context, baseURL string, o loadgen.Options, kind string, conductors int, later time.Duration, statements bool, log *zap.Logger) ([]firstBurstRow, error) {
	dbURL, drop, err := scratchDatabase(ctx, baseURL, fmt.Sprintf("metalloc_first_burst_%d_%s", os.Getpid(), kind), log)
	if err != nil {
		return nil, err
	}
	defer drop()
	if err := analyzeEmpty(ctx, dbURL); err != nil {
		return nil, err
	}
	stack, err := devstack.Start(ctx, devstack.Options{DatabaseURL: dbURL, Conductors: conductors, Log: log})
	if err != nil {
		return nil, err
	}
	defer stack.Stop(context.WithoutCancel(ctx))
	pool, err := db.Open(ctx, dbURL, db.PoolOptions{ApplicationName: "metalloc-bench"})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	o.APIURL = stack.APIURL
	o.Work = stackWork(pool, stack)
	var enrolled time.Time
	var stats string
	o.AfterEnroll = func(ctx context.Context) error {
		enrolled = time.Now()
		if q := firstBurstCases[kind].sql; q != "" {
			log.Info("before the burst", zap.String("sql", q))
			if _, err := pool.Exec(ctx, q); err != nil {
				return err
			}
		}
		logStatistics(ctx, log, pool)
		stats = nodeStatistics(ctx, pool)
		return resetStatements(ctx, pool, statements)
	}
	first, err := loadgen.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	logStatements(ctx, pool, statements, "first burst", log)
	rows := []firstBurstRow{{firstBurstCases[kind].label, first, stats}}
	if kind != "none" || later <= 0 {
		return rows, nil
	}
	wait := time.Until(enrolled.Add(later))
	log.Info("waiting for the later burst", zap.Duration("wait", wait.Round(time.Second)))
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-time.After(wait):
	}
	o.Enrolled = true
	o.AfterEnroll = func(ctx context.Context) error {
		logStatistics(ctx, log, pool)
		stats = nodeStatistics(ctx, pool)
		return resetStatements(ctx, pool, statements)
	}
	second, err := loadgen.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	logStatements(ctx, pool, statements, "later burst", log)
	return append(rows, firstBurstRow{fmt.Sprintf("%s later (the same fleet)", later), second, stats}), nil
}

// resetStatements, with on, clears pg_stat_statements (creating the
// extension in the scratch database first), so that logStatements reports
// one burst.
func resetStatements(ctx context.Context, pool *pgxpool.Pool, on bool) error {
	if !on {
		return nil
	}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("--statements: %w", err)
	}
	_, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	return err
}

// logStatements, with on, logs the ten statements of this database that
// took most time since resetStatements: calls, total and mean time, shared
// buffers per call.
func logStatements(ctx context.Context, pool *pgxpool.Pool, on bool, what string, log *zap.Logger) {
	if !on {
		return
	}
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, shared_blks_hit + shared_blks_read, left(regexp_replace(query, '\s+', ' ', 'g'), 160)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT 10`)
	if err != nil {
		log.Warn("reading pg_stat_statements", zap.Error(err))
		return
	}
	defer rows.Close()
	for rows.Next() {
		var calls, blocks int64
		var total float64
		var query string
		if err := rows.Scan(&calls, &total, &blocks, &query); err != nil {
			log.Warn("reading pg_stat_statements", zap.Error(err))
			return
		}
		log.Info("statement", zap.String("burst", what), zap.Int64("calls", calls), zap.Float64("total_ms", total),
			zap.Float64("mean_ms", total/float64(max(calls, 1))), zap.Float64("buffers_per_call", float64(blocks)/float64(max(calls, 1))),
			zap.String("query", query))
	}
}

// nodeStatistics says, for the table, how many of the nodes table's rows
// changed since it was last analyzed and when that was.
func nodeStatistics(ctx context.Context, pool db.Queryer) string {
	var changed int64
	var analyzed string
	err := pool.QueryRow(ctx, `SELECT n_mod_since_analyze,
		coalesce(to_char(greatest(last_analyze, last_autoanalyze), 'HH24:MI:SS'), 'never')
		FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'nodes'`).Scan(&changed, &analyzed)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%d changed since %s", changed, analyzed)
}

// firstBurstTable formats rows as issue 44's table, then the first
// bursts' rate as a share of the later ones', round by round.
func firstBurstTable(o loadgen.Options, conductors int, later time.Duration, rows []firstBurstRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodes: %d enrolled through the API (one class, three traits each), %d allocations per burst from %d clients, conductors: %d\n\n",
		o.Nodes, o.Allocations, o.Concurrency, conductors)
	b.WriteString("| right after the enrolment | allocations/s | client p50 | client p99 | buffers per allocation | CPU per allocation | nodes table statistics at the burst |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	var first []float64
	for i, r := range rows {
		per := func(d time.Duration) string {
			return (d / time.Duration(max(r.r.Allocations, 1))).Round(10 * time.Microsecond).String()
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.0f | %s | %s |\n", r.label, r.r.Allocate.PerSecond(),
			r.r.Client.P50.Round(time.Millisecond), r.r.Client.P99.Round(time.Millisecond),
			float64(r.r.Work.Buffers)/float64(max(r.r.Allocations, 1)), per(r.r.Work.CPU), r.stats)
		if strings.HasPrefix(r.label, firstBurstCases["none"].label) && i+1 < len(rows) && strings.HasPrefix(rows[i+1].label, later.String()+" later") {
			first = append(first, 100*r.r.Allocate.PerSecond()/max(rows[i+1].r.Allocate.PerSecond(), 1e-9))
		}
	}
	if len(first) > 0 {
		var pct []string
		for _, p := range first {
			pct = append(pct, fmt.Sprintf("%.0f %%", p))
		}
		fmt.Fprintf(&b, "\nfirst burst as a share of the one %s later: %s\n", later, strings.Join(pct, ", "))
	}
	return b.String()
}

// scratchDatabase creates database name on the server of baseURL (a
// postgres:// URL), migrates it and returns its URL and a function that
// drops it (closing what is still connected).
func scratchDatabase(ctx context.Context, baseURL, name string, log *zap.Logger) (string, func(), error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("DATABASE_URL must be a postgres:// URL here (to name a database beside it)")
	}
	admin, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("creating database %s: %w", name, err)
	}
	drop := func() {
		ctx := context.WithoutCancel(ctx)
		c, err := pgx.Connect(ctx, baseURL)
		if err == nil {
			_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
			c.Close(ctx)
		}
		if err != nil {
			log.Warn("dropping the scratch database", zap.String("database", name), zap.Error(err))
		}
	}
	u.Path = "/" + name
	if _, err := db.Migrate(ctx, u.String(), log); err != nil {
		drop()
		return "", nil, err
	}
	return u.String(), drop, nil
}
