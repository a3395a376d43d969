#!/usr/bin/env bash
# Runs sqlc for the packages whose query.sql exists (all of them, normally).
# Usage: scripts/sqlc-gen.sh [pkg ...]
set -euo pipefail
cd "$(dirname "$0")/.."
SQLC=${SQLC:-$(command -v sqlc || echo "$(go env GOPATH)/bin/sqlc")}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(node allocation allocgroup chassis conductor conductor/conductorapi deploytemplate driver/driverapi placement placement/candidate port topology)
cfg=.sqlc-gen.yaml
trap 'rm -f "$cfg"' EXIT
sed -n '1,5p' sqlc.yaml > "$cfg"
for p in "${pkgs[@]}"; do
  [ -f "$p/query.sql" ] || { echo "skip $p: no query.sql"; continue; }
  awk -v q="queries: $p/query.sql" 'index($0,q){f=1; print "  - engine: postgresql"; print "    schema: migrations"} f&&/^  - engine/&&!index($0,q){if(started)exit} f{started=1; print}' sqlc.yaml | sed '3{/queries/!d}' >> "$cfg"
done
"$SQLC" generate -f "$cfg"
