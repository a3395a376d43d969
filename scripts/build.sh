#!/usr/bin/env bash
# make build: bin/metalloc-{api,conductor,manage,placement}, linked with
# LDFLAGS (the version stamp, package buildinfo). While Go compiles it shows
# one progress line (packages compiled of those the binaries need: a fresh
# clone with an empty build cache compiles about 400, a few minutes on 2
# cores), then a line per binary. A compile error prints go's output.
set -euo pipefail
GO=${GO:-go}
BIN=${BIN:-bin}
CMDS="api conductor manage placement"
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
total=$($GO list -deps $(printf './cmd/%s ' $CMDS) | wc -l)
tty=false
[ -t 1 ] && tty=true
# go build -v names each package as it compiles it (cached ones not at all).
status=0
{
  for c in $CMDS; do
    $GO build -v -ldflags "${LDFLAGS:-}" -o "$BIN/metalloc-$c" "./cmd/$c" 2>&1 || { echo "@@failed"; exit 0; }
    echo "@@built $BIN/metalloc-$c"
  done
} | tee "$log" | awk -v total="$total" -v tty="$tty" -v start="$start" '
  function clear() { if (tty == "true" && shown) { printf "\r%-110s\r", ""; shown = 0 } }
  /^@@built / { clear(); printf "built %s (%ds)\n", $2, systime() - start; fflush(); next }
  /^@@failed/ { clear(); next }
  /^#|:[0-9]+:/ { next }   # compiler messages: printed below
  { n++
    line = sprintf("compiling Go packages: %d of at most %d (%ds) %s", n, total, systime() - start, $0)
    if (tty == "true") { printf "\r%-110.110s", line; shown = 1; fflush() }
    else if (n % 50 == 0) { print line; fflush() }
  }'
if grep -q '^@@failed' "$log"; then
  grep -v -e '^@@' -e '^[a-zA-Z0-9_./-]*$' "$log" >&2 || true
  echo "make build: go build failed" >&2
  exit 1
fi
echo "make build: done in $(( $(date +%s) - start ))s"
