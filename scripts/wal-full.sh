#!/usr/bin/env bash
# The WAL disk-full run (docs/operations.md, "WAL disk full"), not part of
# `make test`: it needs root to mount a small tmpfs. A PostgreSQL cluster
# keeps its WAL on a 48 MB tmpfs (fsync and synchronous_commit on, as in
# production); metalloc-api and one conductor serve a steady stream of
# allocations while another client fills the WAL. When the WAL device is
# full, PostgreSQL stops (PANIC: No space left on device); the script then
# grows the tmpfs, starts PostgreSQL again (crash recovery), and checks that
# every allocation that got a 201 is there and active, that nothing is
# double-booked, and that pg_amcheck finds no corruption. It prints what
# clients saw in each phase.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (it mounts a tmpfs)"; exit 2; }
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d /tmp/metalloc-walfull-XXXX); chmod 755 "$work"; chown postgres "$work"
wal=$work/walfs; mkdir -p "$wal"; mount -t tmpfs -o size=48m tmpfs "$wal"; chown postgres "$wal"
port=55$((RANDOM % 900 + 100)); apiport=$((port + 1))
pg() { runuser -u postgres -- "$@"; }
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  pg "$bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
  umount "$wal" 2>/dev/null || true
  echo "logs kept in $work"
}
pids=(); trap cleanup EXIT
mkdir "$work/data"; chown postgres "$work/data"; chmod 700 "$work/data"
pg "$bin/initdb" -D "$work/data" -U postgres --auth=trust --waldir="$wal/pg_wal" >/dev/null
pg "$bin/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c max_wal_size=32MB -c min_wal_size=32MB" start >/dev/null
url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
make -s build >/dev/null
bin/metalloc-manage db sync --database.url "$url" >/dev/null 2>&1
psql -q "$url" -c "INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state)
  SELECT gen_random_uuid(), 'w-' || i, 'fake-hardware', 'wal', 'available', 'power off' FROM generate_series(1, 5000) i"
METALLOC_DATABASE_URL=$url METALLOC_API_LISTEN=127.0.0.1:$apiport METALLOC_API_REQUEST_TIMEOUT=3s \
  bin/metalloc-api >"$work/api.log" 2>&1 & pids+=($!)
METALLOC_DATABASE_URL=$url METALLOC_CONDUCTOR_HOSTNAME=wal-1 METALLOC_CONDUCTOR_METRICS_LISTEN=127.0.0.1:0 \
  bin/metalloc-conductor >"$work/conductor.log" 2>&1 & pids+=($!)
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$apiport/" >/dev/null && break; sleep 0.1; done

# The client: one POST every 20 ms, status and uuid per line.
client() {
  while :; do
    out=$(curl -s -m 5 -o /dev/stdout -w ' %{http_code}' -H 'Content-Type: application/json' \
      -H 'X-OpenStack-Ironic-API-Version: 1.82' -d '{"resource_class": "wal"}' \
      "http://127.0.0.1:$apiport/v1/allocations" || echo " 000")
    code=${out##* }; uuid=$(printf '%s' "$out" | grep -o '"uuid": *"[^"]*"' | head -1 | cut -d'"' -f4 || true)
    echo "$(date +%s.%N) $code $uuid"
    sleep 0.02
  done
}
client >"$work/client.log" & pids+=($!)
sleep 2
phase() { echo "== $1: $(awk -v t0="$2" -v t1="$3" '$1>=t0 && $1<t1 {print $2}' "$work/client.log" | sort | uniq -c | tr '\n' ' ')"; }
t0=$(date +%s.%N)
echo "filling the WAL device..."
psql -q "$url" -c "CREATE TABLE filler (b text)" >/dev/null
psql -q "$url" -c "INSERT INTO filler SELECT repeat(md5(i::text), 64) FROM generate_series(1, 2000000) i" 2>&1 | tail -1 || true
t1=$(date +%s.%N)
sleep 5
grep -m1 -E "PANIC|No space left" "$work/postgres.log" || true
pg "$bin/pg_ctl" -D "$work/data" status >/dev/null 2>&1 && echo "PostgreSQL still running" || echo "PostgreSQL stopped"
t2=$(date +%s.%N)
echo "space returns: tmpfs grown to 512 MB, PostgreSQL started again (crash recovery)"
mount -o remount,size=512m "$wal"
pg "$bin/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w -o "-p $port -k /tmp -c listen_addresses=127.0.0.1" start >/dev/null 2>&1 || true
psql -q "$url" -c "DROP TABLE IF EXISTS filler" >/dev/null
sleep 5
t3=$(date +%s.%N)
kill "${pids[2]}" || true; sleep 3
phase "before the fill" 0 "$t0"; phase "while the WAL filled" "$t0" "$t1"; phase "device full" "$t1" "$t2"; phase "after recovery" "$t2" "$t3"
acked=$(awk '$2 == 201 {print $3}' "$work/client.log" | sort -u)
n=$(echo "$acked" | grep -c . || true)
missing=0
for u in $acked; do
  s=$(psql -Atq "$url" -c "SELECT state FROM allocations WHERE uuid = '$u'")
  [ "$s" = active ] || missing=$((missing + 1))
done
double=$(psql -Atq "$url" -c "SELECT count(*) FROM (SELECT node_id FROM allocations WHERE node_id IS NOT NULL GROUP BY 1 HAVING count(*) > 1) d")
psql -q "$url" -c "CREATE EXTENSION IF NOT EXISTS amcheck" >/dev/null
if pg "$bin/pg_amcheck" -h 127.0.0.1 -p "$port" -U postgres --heapallindexed postgres >/dev/null 2>&1; then amcheck=clean; else amcheck=FAILED; fi
echo "acknowledged $n, missing or not active $missing, double-booked $double, pg_amcheck $amcheck"
grep -c '"status":500' "$work/api.log" | sed 's/^/API 500s logged: /'
