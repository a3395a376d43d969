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
{
  for c in $CMDS; do
    $GO build -v -ldflags "${LDFLAGS:-}" -o "$BIN/metalloc-$c" "./cmd/$c" 2>&1 || { echo "@@failed"; exit 0; }
    echo "@@built $BIN/metalloc-$c"
  done
} | tee "$log" | {
  n=0
  shown=false
  clear() { if $shown; then printf '\r%-110s\r' ''; shown=false; fi; }
  while IFS= read -r line; do
    case "$line" in
    @@built\ *) clear; echo "built ${line#@@built } ($(( $(date +%s) - start ))s)" ;;
    @@failed) clear ;;
    \#* | *:[0-9]*:*) ;;   # compiler messages: printed below
    *)
      n=$((n + 1))
      msg="compiling Go packages: $n of at most $total ($(( $(date +%s) - start ))s) $line"
      if $tty; then printf '\r%-110.110s' "$msg"; shown=true
      elif [ $((n % 50)) -eq 0 ]; then echo "$msg"; fi ;;
    esac
  done
  clear
}
if grep -q '^@@failed' "$log"; then
  grep -v -e '^@@' -e '^[a-zA-Z0-9_./-]*$' "$log" >&2 || true
  echo "make build: go build failed" >&2
  exit 1
fi
echo "make build: done in $(( $(date +%s) - start ))s"
