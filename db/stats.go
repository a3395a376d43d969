package db

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Work is what a database and some processes have done so far, as
// cumulative counters (for benchmarks: take two and subtract).
type Work struct {
	// Buffers is the database's shared-buffer hits plus reads
	// (pg_stat_database). Each backend adds its counts at most once a
	// second, and an idle one up to 10 s later (PostgreSQL 15's
	// PGSTAT_MIN_INTERVAL and PGSTAT_IDLE_INTERVAL): a difference of two
	// readings can miss the last second's work and include earlier work.
	Buffers int64
	// CPU is the user plus system CPU time of the given processes and of
	// the server processes connected to the database right now (a backend
	// that exited since the previous reading takes its time with it);
	// DatabaseCPU is the server processes' part of it.
	CPU, DatabaseCPU time.Duration
	// Backends is each server process's part of DatabaseCPU, by pid.
	Backends map[int]time.Duration
}

// Since is what happened between prev and w, two readings of the same
// processes: buffers and the processes' CPU time subtracted, the server
// processes' CPU by pid (one that was not there at prev started since and
// counts whole; one that exited since counts for nothing, never less),
// so that a connection closing between the readings (a pool shrinking, a
// bulk import's pool closed) does not make the difference negative.
func (w Work) Since(prev Work) Work {
	d := Work{Buffers: w.Buffers - prev.Buffers, Backends: map[int]time.Duration{}}
	for pid, cpu := range w.Backends {
		d.Backends[pid] = max(cpu-prev.Backends[pid], 0)
		d.DatabaseCPU += d.Backends[pid]
	}
	d.CPU = max(w.CPU-w.DatabaseCPU-(prev.CPU-prev.DatabaseCPU), 0) + d.DatabaseCPU
	return d
}

// ReadWork reads Work for pool's database and the processes pids (Linux:
// /proc/PID/stat, which needs the database server on this machine).
func ReadWork(ctx context.Context, pool *pgxpool.Pool, pids ...int) (Work, error) {
	var w Work
	if err := pool.QueryRow(ctx, `SELECT blks_hit + blks_read FROM pg_stat_database
		WHERE datname = current_database()`).Scan(&w.Buffers); err != nil {
		return w, fmt.Errorf("reading pg_stat_database: %w", err)
	}
	for _, pid := range pids {
		w.CPU += processCPU(pid)
	}
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return w, fmt.Errorf("reading pg_stat_activity: %w", err)
	}
	w.Backends = map[int]time.Duration{}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return w, err
		}
		cpu := processCPU(pid)
		w.Backends[pid] = cpu
		w.DatabaseCPU += cpu
	}
	if err := rows.Err(); err != nil {
		return w, err
	}
	w.CPU += w.DatabaseCPU
	return w, nil
}

// processCPU is utime + stime of pid, 0 if it cannot be read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is the kernel's USER_HZ, 100 on every Linux architecture Go
// supports.
const clockTicks = 100

// PeakMemory is the highest resident set size pid has had (VmHWM in
// /proc/PID/status), 0 if it cannot be read. Memory mapped from huge pages
// is not part of it (HugePagesMemory).
func PeakMemory(pid int) int64 {
	return statusBytes(pid, "VmHWM:")
}

// HugePagesMemory is how much huge-page memory pid has mapped now
// (HugetlbPages in /proc/PID/status): for a PostgreSQL backend, the part of
// the server's shared memory it has touched when the server runs on huge
// pages (its huge_pages setting, and pages the kernel reserved with
// vm.nr_hugepages); 0 when it does not, or when the file cannot be read.
func HugePagesMemory(pid int) int64 {
	return statusBytes(pid, "HugetlbPages:")
}

// statusBytes is the "<field> N kB" line of /proc/PID/status in bytes, 0
// if it cannot be read.
func statusBytes(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
