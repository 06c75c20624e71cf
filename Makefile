# Quorumbus build. `make run` starts a single-node broker; `make test` is what CI runs.
GO      ?= go
PKGS    ?= ./...
DATA    ?= ./data
BIN     := bin

.PHONY: all build test test-short test-long lint vet fuzz bench bench-cluster run clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The whole suite, race detector on, loopback only. Kept well under 20 minutes on 2 cores.
test: vet
	$(GO) test -race -count=1 -timeout 25m $(PKGS)

test-short:
	$(GO) test -count=1 -short $(PKGS)

# Long soak and chaos runs; CI may call them with bounded sizes.
test-long:
	$(GO) test -race -count=1 -tags long -timeout 60m $(PKGS)

vet:
	$(GO) vet $(PKGS)

lint: vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

# Each fuzz target for a short bounded time (override FUZZTIME).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# The multi-node benchmarks (test/bench/cluster_test.go): 3 quorumbus processes on this
# machine, fsync on, sizes bounded by the flags below (about 4 minutes on 2 cores). Not
# part of `make test`. Figures: docs/benchmarks.md, "multi-node cluster".
CLUSTER_BENCH_ARGS ?= -cluster.n 20000 -cluster.latn 10000 -cluster.idle 10s -cluster.groups 1,16,64
bench-cluster:
	$(GO) test -run '^$$' -bench '^BenchmarkCluster' -benchtime 1x -timeout 20m ./test/bench/ -args $(CLUSTER_BENCH_ARGS)

run:
	@if [ -d cmd/quorumbus ]; then $(GO) run ./cmd/quorumbus --data $(DATA); \
	else echo "make run: the broker (cmd/quorumbus) is not built yet; see issues"; exit 1; fi

clean:
	rm -rf $(BIN)
