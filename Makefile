# metalloc: `make run` starts the whole system locally, `make test` runs every
# test (both on a private PostgreSQL unless DATABASE_URL is set).
GO      ?= go
BIN     := bin
# What --version, the start-up log line and metalloc_build_info report
# (package buildinfo). DATE honours SOURCE_DATE_EPOCH (reproducible builds).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
DATE    ?= $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)} +%Y-%m-%dT%H:%M:%SZ)
BI      := github.com/metalloc/metalloc/buildinfo
LDFLAGS := -X $(BI).version=$(VERSION) -X $(BI).commit=$(COMMIT) -X $(BI).date=$(DATE)
# make run's node file: the sample fleet the documentation uses
# (examples/dc1-nodes.yaml, 240 nodes); NODES=FILE for your own.
NODES   ?= examples/dc1-nodes.yaml
# Conductors of make run and make bench.
CONDUCTORS ?= 2
# make run's listeners, all on 127.0.0.1 (dev up's --api-port,
# --placement-port (or off), --pg-port and --metrics-port: conductor N's
# metrics on METRICS_PORT+N-1); 0 is a free port, printed once up.
API_PORT       ?= 6385
PLACEMENT_PORT ?= 8778
PG_PORT        ?= 0
METRICS_PORT   ?= 0
# IRONIC=1: make run in front of a real Ironic 21.4 (dev up --ironic;
# Debian's packages, installed when missing), its API on IRONIC_PORT, the
# nodes of NODES enrolled in it (docs/ironic.md).
IRONIC         ?=
IRONIC_PORT    ?= 6386

.PHONY: build run test generate lint bench bench-ironic fuzz deb

# The four binaries in bin/, with a progress line while the packages compile
# (scripts/build.sh; a fresh clone compiles about 400 packages).
build:
	@GO="$(GO)" BIN="$(BIN)" LDFLAGS="$(LDFLAGS)" scripts/build.sh

# Private PostgreSQL + migrations + metalloc-api + CONDUCTORS conductors
# (2) + metalloc-placement + the nodes of NODES, on the ports above (with
# IRONIC=1 also Ironic, the nodes enrolled there); Ctrl-C stops it and
# deletes the data. A second shell gets its environment with
# eval "$(bin/metalloc-manage dev env)".
run: build
	$(BIN)/metalloc-manage dev up --nodes $(NODES) --conductors $(CONDUCTORS) --api-port $(API_PORT) \
		--placement-port $(PLACEMENT_PORT) --pg-port $(PG_PORT) --metrics-port $(METRICS_PORT) \
		$(if $(filter-out 0 no false,$(IRONIC)),--ironic --ironic-port $(IRONIC_PORT))

# Every test, race detector on, against a real PostgreSQL (and the reference
# OpenStack Placement, installed from Debian's packages when missing).
test: build
	scripts/test-deps.sh
	$(BIN)/metalloc-manage dev exec -- $(GO) test -race -count=1 -timeout 30m ./...
	scripts/fuzz.sh $(FUZZTIME)

# The Debian package metalloc_<version>_amd64.deb (scripts/deb.sh, nfpm;
# docs/deployment.md "Running a cluster").
deb:
	scripts/deb.sh

# Every Go native fuzz target for FUZZTIME each: a duration (try 10m) or a
# count of executions (make test: 30000x, scripts/fuzz.sh says why).
FUZZTIME ?= 30000x
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

# Regenerate sqlc code (needs sqlc: go install github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1),
# db/schema.sql (the schema after every migration, from pg_dump), and
# configs/metalloc.yaml and docs/configuration.md's configuration table (from the key
# definitions in config/registry.go).
generate:
	scripts/sqlc-gen.sh
	scripts/schema-dump.sh
	$(GO) test -count=1 ./config -run TestGeneratedDocs -update

# staticcheck v0.8.2 (go install honnef.co/go/tools/cmd/staticcheck@v0.8.2),
# as .ci/run runs it.
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(STATICCHECK) ./...

# Allocation load benchmark (see docs/benchmarks.md), on a fresh private
# PostgreSQL: make bench NODES=100000 ALLOCS=10000 ENROLL=import. NODES is
# the node count here (make run's default node file or sample means 10000).
ALLOCS      ?= 5000
CONCURRENCY ?= 32
ENROLL      ?= api
POLL        ?= 5ms
MODE        ?= poll
BENCHFLAGS  ?=
# metalloc in front of a real Ironic 21.4 (Debian's packages) side by side
# with that Ironic alone (docs/ironic.md): make bench-ironic
# IRONIC_NODES=500,2000 IRONIC_ALLOCS=300 IRONIC_CONCURRENCY=16; lists in
# IRONIC_CONCURRENCY and IRONIC_LIMITS (--max-in-flight: adaptive,1,2,4,...)
# run every client count with every limit on Ironic (issue 44's sweep);
# IRONIC_DURATION=60s times each run by a window of Ironic's periodic
# tasks' period instead of a count (IRONIC_ALLOCS then only caps it).
IRONIC_NODES       ?= 500,2000
IRONIC_ALLOCS      ?= 300
IRONIC_CONCURRENCY ?= 16
IRONIC_ROUNDS      ?= 2
IRONIC_LIMITS      ?=
IRONIC_DURATION    ?=
bench-ironic: build
	$(BIN)/metalloc-manage dev exec -- $(BIN)/metalloc-manage bench ironic --nodes $(IRONIC_NODES) \
		--allocations $(IRONIC_ALLOCS) --concurrency $(IRONIC_CONCURRENCY) --rounds $(IRONIC_ROUNDS) \
		$(if $(IRONIC_LIMITS),--max-in-flight $(IRONIC_LIMITS)) $(if $(IRONIC_DURATION),--duration $(IRONIC_DURATION)) $(BENCHFLAGS)

BENCH_NODES = $(if $(filter %.yaml %.yml %.json sample,$(NODES)),10000,$(NODES))
# MODE=first-burst is issue 44's scenario (docs/benchmarks.md): every case on
# a database of its own, 10,000 nodes enrolled through the API, then at once
# a burst of 3,000 (ALLOCS when given), against the same burst 70 s later.
# MODE=leases is issue 43's (docs/benchmarks.md): 10,000 reservable nodes
# imported, 5,000 leases (ALLOCS when given) over 30 days admitted by
# CONCURRENCY clients, availability searches, 100 leases starting in one second.
bench: build
ifeq ($(MODE),first-burst)
	$(BIN)/metalloc-manage dev exec -- $(BIN)/metalloc-manage bench first-burst \
		--nodes $(BENCH_NODES) --allocations $(if $(filter command line environment,$(origin ALLOCS)),$(ALLOCS),3000) \
		--concurrency $(CONCURRENCY) --conductors $(CONDUCTORS) $(BENCHFLAGS)
else ifeq ($(MODE),leases)
	$(BIN)/metalloc-manage dev exec -- $(BIN)/metalloc-manage bench leases \
		--nodes $(BENCH_NODES) --leases $(ALLOCS) --concurrency $(CONCURRENCY) --conductors $(CONDUCTORS) $(BENCHFLAGS)
else
	$(BIN)/metalloc-manage dev exec -- $(BIN)/metalloc-manage bench allocations \
		--nodes $(BENCH_NODES) --allocations $(ALLOCS) \
		--concurrency $(CONCURRENCY) --conductors $(CONDUCTORS) --enroll $(ENROLL) --poll-interval $(POLL) --mode $(MODE) \
		$(BENCHFLAGS)
endif
