#!/usr/bin/env bash
# Runs every Go native fuzz target for a budget each (default 30000x):
#   scripts/fuzz.sh [budget]      e.g. scripts/fuzz.sh 10m, scripts/fuzz.sh 200000x
# The budget is go test's -fuzztime: a duration, or a count of executions
# ("30000x", what make test runs). `go test` alone runs only the seed
# corpora; this explores. A failure leaves the crashing input under
# <package>/testdata/fuzz/<target>/, which `go test` then replays: commit it
# with the fix.
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when a duration budget ends while a worker is mid-call
# (go.dev/issue/75804, fixed in Go 1.27); CI hit it on FuzzCandidateQuery
# with no input written. A count budget has no deadline to race, so make test
# uses one. With a duration budget, such a failure (that message, no input
# written) is reported as that race and the target's corpus is replayed
# instead: the run fails only if the replay does.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-30000x}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in ./node:FuzzPatch ./allocation:FuzzCreateBody ./placement:FuzzCandidateQuery ./web:FuzzParseVersion ./auth/policy:FuzzParse ./topology:FuzzPutBody; do
  pkg="${t%%:*}" target="${t##*:}"
  echo "fuzzing $target in $pkg for $budget"
  if go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$budget" 2>&1 | tee "$log"; then
    continue
  fi
  if [[ "$budget" != *x ]] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
    echo "$target: bare \"context deadline exceeded\" at the end of the budget, no input written (go.dev/issue/75804); replaying its corpus"
    go test "$pkg" -count=1 -run "^${target}\$"
    continue
  fi
  exit 1
done
