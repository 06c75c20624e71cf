# Quorumbus build. `make run` starts a single-node broker; `make test` is what CI runs.
GO      ?= go
PKGS    ?= ./...
DATA    ?= ./data
BIN     := bin

.PHONY: all build test test-e2e-cluster test-short test-long lint vet fuzz bench run clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The whole suite, race detector on, loopback only. Kept well under 20 minutes on 2 cores.
test: vet
	$(GO) test -race -count=1 -timeout 25m $(PKGS)
	$(MAKE) test-e2e-cluster

# The SDK end-to-end suite again, through the node of a 3-node cluster that hosts no
# replica of the entities it uses (every operation forwarded to another node).
test-e2e-cluster:
	E2E_CLUSTER=1 $(GO) test -count=1 -timeout 15m ./test/e2e/

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

run:
	@if [ -d cmd/quorumbus ]; then $(GO) run ./cmd/quorumbus --data $(DATA); \
	else echo "make run: the broker (cmd/quorumbus) is not built yet; see issues"; exit 1; fi

clean:
	rm -rf $(BIN)
