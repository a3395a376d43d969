#!/usr/bin/env bash
# Runs sqlc for every package of sqlc.yaml (`make generate`, .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
SQLC=${SQLC:-$(command -v sqlc || echo "$(go env GOPATH)/bin/sqlc")}
"$SQLC" generate -f sqlc.yaml
