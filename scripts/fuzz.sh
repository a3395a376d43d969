#!/usr/bin/env bash
# Runs every Go native fuzz target for a budget each (default 10s):
#   scripts/fuzz.sh [duration]      e.g. scripts/fuzz.sh 10m
# `go test` alone runs only their seed corpora; this explores. A failure
# leaves the crashing input under <package>/testdata/fuzz/<target>/, which
# `go test` then replays: commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-10s}"
for t in ./node:FuzzPatch ./allocation:FuzzCreateBody ./placement:FuzzCandidateQuery ./web:FuzzParseVersion ./auth/policy:FuzzParse ./topology:FuzzPutBody; do
  pkg="${t%%:*}" target="${t##*:}"
  echo "fuzzing $target in $pkg for $budget"
  go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$budget"
done
