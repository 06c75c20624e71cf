# Quorumbus build. `make run` starts a single-node broker; CI runs `make lint` then `make test`.
GO      ?= go
comma   := ,
PKGS    ?= ./...
# Test-only Go modules of their own, so that what only they use (the benchmark's
# RabbitMQ, NATS and plotting clients; chromedp; go-fuse for test/lazyfs, which the
# product's power-loss tests build and run through test/lazyfsctl) stays out of the
# product's go.mod. vet, lint and test cover them too. (helm/quorumbus/test and
# deploy/image, also modules of their own, are vetted and tested by helm-test and
# image-test.)
SUBMODS := test/bench/compare test/ui test/lazyfs
DATA    ?= ./data
BIN     := bin

.PHONY: all build test raft-test raft-test-batch raft-diff test-upgrade test-e2e-cluster test-order test-short test-long lint vet fuzz bench bench-cluster bench-compare run clean conformance chaos chaos-long chaos-deps chaos-table image image-test kube-bin helm-test ui-test

all: build

# The build's version and revision (cmd/internal/version): the nearest tag (or the commit),
# and the commit, marked -dirty when the work tree has changes. Override for a release:
# make build VERSION=v1.2.0.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
VERSION_LDFLAGS = -X github.com/quorumbus/quorumbus/cmd/internal/version.version=$(VERSION) \
  -X github.com/quorumbus/quorumbus/cmd/internal/version.revision=$(REVISION)

build:
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ ./cmd/...

# The whole suite, race detector on, loopback only. Kept well under 20 minutes on 2 cores.
# Then the tests built only without the race detector (//go:build !race: they measure
# memory, which the race allocator pads, or send 100 000 messages through the SDK, which
# the race detector slows 10x); test/norace_test.go checks each is listed here.
NORACE_TESTS := ^(TestMemoryPerMessage|TestNodeMemoryPerMessage)$$
NORACE_PKGS  := ./fsm/ ./test/bench/
test: vet
	$(GO) test -race -count=1 -timeout 25m $(PKGS)
	cd test/bench/compare && $(GO) test -race -count=1 -timeout 10m ./...
	cd test/lazyfs && $(GO) test -race -count=1 -timeout 5m ./...
	$(GO) test -count=1 -run '$(NORACE_TESTS)' $(NORACE_PKGS)
	$(MAKE) test-e2e-cluster
	$(MAKE) test-order
	$(MAKE) raft-test

# hashicorp/raft is patched in the repository (third_party/hashicorp-raft, wired in by
# go.mod's replace; docs/raft-patches.md lists every patch). raft-test runs upstream's
# own suite on the fork (third_party/raft-test.sh: -race, a test that fails is run again
# alone up to twice, and named); raft-test-batch the same with upstream's batchtest tag
# (the FSM's batched apply). raft-diff prints what the fork changes against the pristine
# module of the same version from the module cache.
RAFT_VERSION := v1.7.3
RAFT_FORK    := third_party/hashicorp-raft
raft-test:
	GO=$(GO) third_party/raft-test.sh
raft-test-batch:
	GO=$(GO) third_party/raft-test.sh -tags batchtest
raft-diff:
	@pristine=$$(cd $$(mktemp -d) && GOFLAGS= $(GO) mod download -json github.com/hashicorp/raft@$(RAFT_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	test -n "$$pristine" || { echo "raft-diff: github.com/hashicorp/raft@$(RAFT_VERSION) not in the module cache"; exit 1; }; \
	diff -ruN "$$pristine" $(RAFT_FORK); rc=$$?; test $$rc -le 1

# The delivery-order checks 20 times over beside a busy loop per core (issue 22: they
# passed on a quiet machine and failed on a loaded one). About a minute on 2 cores.
ORDER_TESTS := ^(TestOutgoingBoundStillDelivers|TestRequeueBeforeNextReceive|TestPeekResponseBounded|TestSDKSessions)$$
test-order:
	test/load/under-cpu-hog.sh $(GO) test -race -count=20 -timeout 10m -run '$(ORDER_TESTS)' ./amqp/
	test/load/under-cpu-hog.sh $(GO) test -race -count=5 -timeout 10m -run '^TestSend$$/^Batch$$' ./test/e2e/

# The SDK end-to-end suite again, through the node of a 3-node cluster that hosts no
# replica of the entities it uses (every operation forwarded to another node).
test-e2e-cluster:
	E2E_CLUSTER=1 $(GO) test -count=1 -timeout 15m ./test/e2e/

# A 3-node cluster of the previous release (test/cluster/upgrade_test.go pins its commit,
# built from this clone's history) upgraded to this checkout one node at a time under SDK
# load. Needs the clone's history (not a shallow clone).
test-upgrade:
	$(GO) test -count=1 -tags upgrade -timeout 20m -run 'TestRollingUpgradeFromPreviousRelease' ./test/cluster/

test-short:
	$(GO) test -count=1 -short $(PKGS)

# Long soak and chaos runs; CI may call them with bounded sizes.
test-long:
	$(GO) test -race -count=1 -tags long -timeout 60m $(PKGS)

vet:
	$(GO) vet $(PKGS)
	@for m in $(SUBMODS); do echo "cd $$m && $(GO) vet ./..."; (cd $$m && $(GO) vet ./...) || exit 1; done

# The Jepsen-style fault suite (test/chaos): nodes on network namespaces of their own,
# faults by kill/SIGSTOP, nftables and a userspace proxy, a checker over the client
# history. Needs root; installs iproute2 and nftables when missing. `make chaos` runs the
# standard plan (every fault alone, then mixed pairs) for a fixed seed and a random one,
# printed; rerun one with CHAOS_SEEDS=N. Failing runs keep history and node logs in
# $(CHAOS_RESULTS). Exits non-zero on any violation.
CHAOS_SEEDS   ?= 1,random
CHAOS_RESULTS ?= $(CURDIR)/chaos-results
CHAOS_STATS   ?= $(CHAOS_RESULTS)/stats.jsonl
DURATION      ?= 30m
CHAOS_ENV = QUORUMBUS_CHAOS=1 QUORUMBUS_HOSTS=1 CHAOS_RESULTS=$(CHAOS_RESULTS) CHAOS_STATS=$(CHAOS_STATS)

chaos-deps:
	@if ! command -v nft >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then \
	  apt-get update -qq && apt-get install -y -qq iproute2 nftables; fi
	@mkdir -p $(CHAOS_RESULTS)

chaos: chaos-deps
	$(CHAOS_ENV) CHAOS_SEEDS=$(CHAOS_SEEDS) $(GO) test -count=1 -timeout 15m -p 1 -v -run 'TestHosts|TestChaos' ./test/hosts/ ./test/chaos/

# The table of docs/guarantees.md from every run recorded in $(CHAOS_STATS).
chaos-table:
	@QUORUMBUS_CHAOS_TABLE=1 CHAOS_STATS=$(CHAOS_STATS) $(GO) test -count=1 -v -run TestChaosTable ./test/chaos/ | grep -v -E '^(=== RUN|--- PASS|PASS|ok )'

# Mixed faults for DURATION with one random seed (or CHAOS_SEEDS=N).
chaos-long: chaos-deps
	$(CHAOS_ENV) CHAOS_SEEDS=$(if $(filter 1$(comma)random,$(CHAOS_SEEDS)),random,$(CHAOS_SEEDS)) CHAOS_DURATION=$(DURATION) \
	  $(GO) test -count=1 -timeout 24h -v -run TestChaos ./test/chaos/

# gofmt, go vet and staticcheck; CI runs it before `make test`. staticcheck is pinned
# and installed into $(BIN)/ on first use, so a clean machine needs nothing but Go.
# Files behind build tags are checked in a second pass with LINT_TAGS.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
LINT_TAGS           := long,invariants,interop,upgrade

lint: vet $(STATICCHECK)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet -tags $(LINT_TAGS) $(PKGS)
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags $(LINT_TAGS) $(PKGS)
	@for m in $(SUBMODS); do echo "cd $$m && staticcheck ./..."; (cd $$m && $(abspath $(STATICCHECK)) ./...) || exit 1; done

$(STATICCHECK):
	GOBIN=$(abspath $(dir $@)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Each fuzz target for a short bounded time (override FUZZTIME).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The official SDKs against a fresh node, then a fresh 3-node cluster (through the node
# that hosts no replica), on loopback: the Go SDK's own live tests (../shared/sdk-livetests,
# or QB_SDK_LIVETESTS), the JavaScript runner (test/js) and, on nodes serving TLS, the
# Python runner (test/python; installs Debian's python3-azure and python3-uamqp when
# missing, needs 127.0.0.1:5671 free). QB_PHASES=single runs only the first; QB_SKIP_GO=1,
# QB_SKIP_JS=1, QB_SKIP_PY=1 leave a runner out. See docs/compatibility.md.
conformance:
	test/conformance/run.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# The multi-node benchmarks (test/bench/cluster_test.go): 3 quorumbus processes on this
# machine, fsync on, sizes bounded by the flags below (about 4 minutes on 2 cores). Not
# part of `make test`. Figures: docs/benchmarks.md, "multi-node cluster".
CLUSTER_BENCH_ARGS ?= -cluster.n 20000 -cluster.latn 10000 -cluster.idle 10s -cluster.groups 1,16,64
bench-cluster:
	$(GO) test -run '^$$' -bench '^BenchmarkCluster' -benchtime 1x -timeout 20m ./test/bench/ -args $(CLUSTER_BENCH_ARGS)

# Quorumbus, RabbitMQ 3.10 quorum queues and NATS 2.9 JetStream R3 side by side: each as
# a 3-node cluster on 127.0.0.1, one at a time, one load tool (test/bench/compare, a
# module of its own), REPS repetitions of N messages per throughput test. Installs
# rabbitmq-server and nats-server from Debian when missing (root), stops every process it started, and rewrites the table
# in docs/benchmarks.md and docs/img/bench-compare.png. About 45 minutes with the
# defaults (N=100000 REPS=3). Not part of `make test`. SYSTEMS is any of: quorumbus quorumbus-sdk
# rabbit-091 rabbit-amqp10 nats.
bench-compare:
	$(if $(N),N=$(N)) $(if $(REPS),REPS=$(REPS)) $(if $(SYSTEMS),SYSTEMS="$(SYSTEMS)") \
	  bash test/bench/compare/run.sh

# A single-node broker with its data in $(DATA); it prints the connection string
# (--print-connection-string: a node prints the root key only when asked or at a terminal).
# One node, data in $(DATA). It compiles first, which the first time (modules to
# download, every package to build) takes minutes on a small machine; it says so. Other
# ports or settings: make run ARGS='--amqp-addr 127.0.0.1:5673 --admin-addr 127.0.0.1:5301'
# (docs/configuration.md lists every flag).
ARGS ?=
run:
	@echo "make run: compiling quorumbus and qbctl into $(BIN)/ (the first build can take several minutes)..."
	$(GO) build -o $(BIN)/ ./cmd/quorumbus ./cmd/qbctl
	@echo "make run: starting one node, data in $(DATA)"
	$(BIN)/quorumbus --data $(DATA) --print-connection-string $(ARGS)

clean:
	rm -rf $(BIN)

# The container image as a `docker save` tarball (docker load, podman load, kind load
# image-archive, ctr images import), built without Docker by deploy/image, its own module.
# deploy/Dockerfile builds the same image with Docker.
# Tagged as what the chart names with image.repository=quorumbus (the tag defaults to appVersion).
IMAGE_VERSION ?= $(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' helm/quorumbus/Chart.yaml)
IMAGE_TAG ?= quorumbus:$(IMAGE_VERSION)
IMAGE_TAR ?= $(BIN)/quorumbus-image.tar
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" \
	  -o $(BIN)/linux-$(IMAGE_ARCH)/ ./cmd/quorumbus ./cmd/qbctl
	cd deploy/image && $(GO) run . -bin ../../$(BIN)/linux-$(IMAGE_ARCH) -arch $(IMAGE_ARCH) \
	  -tag $(IMAGE_TAG) -version $(IMAGE_VERSION) -o ../../$(IMAGE_TAR) -revision "$$(git rev-parse --short HEAD 2>/dev/null)"

# Unpacks the image and runs it as its user in a read-only root (needs root).
image-test:
	cd deploy/image && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# etcd and kube-apiserver for the chart's run through a real API server
# (TestHelmThroughARealAPIServer), at the versions apivalidate's go.mod requires (its
# tool directives), kube-apiserver stamped with its version as a release build is. The
# first build takes minutes; then the build cache makes it a link.
KUBE_BIN := $(CURDIR)/$(BIN)/kube
kube-bin:
	cd helm/quorumbus/test/apivalidate && v=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes) && mm=$${v#v} && \
	  $(GO) build -o $(KUBE_BIN)/etcd go.etcd.io/etcd/server/v3 && \
	  $(GO) build -ldflags "-X k8s.io/component-base/version.gitVersion=$$v -X k8s.io/component-base/version.gitMajor=$${mm%%.*} -X k8s.io/component-base/version.gitMinor=$$(echo $$mm | cut -d. -f2)" \
	    -o $(KUBE_BIN)/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

# The Helm chart: render over a values matrix with the Helm SDK, lint --strict, decode
# strictly into k8s.io/api types and boot the rendered pods, each on a test host of its
# own (helm/quorumbus/test; test/hosts needs iproute2 and nftables, as chaos does);
# helm install, test and upgrade through a real kube-apiserver on etcd (kube-bin); then
# the API server's own validation of every rendered object (helm/quorumbus/test/apivalidate,
# which requires k8s.io/kubernetes: slow to build the first time).
helm-test: image-test chaos-deps kube-bin
	cd helm/quorumbus/test && $(GO) vet ./... && QUORUMBUS_KUBE_BIN=$(KUBE_BIN) $(GO) test -count=1 -timeout 20m ./...
	cd helm/quorumbus/test/apivalidate && $(GO) vet ./... && $(GO) test -count=1 -timeout 20m ./...

# The explorer web UI in a real browser (test/ui, a module of its own): Debian's
# headless Chromium, installed when missing (needs root), driven with chromedp against a real node. It fails on any
# browser console error and keeps a screenshot of each main page in $(UI_ARTIFACTS).
UI_ARTIFACTS ?= $(CURDIR)/ui-artifacts
ui-test:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  apt-get update -qq && apt-get install -y -qq chromium; fi
	@mkdir -p $(UI_ARTIFACTS)
	cd test/ui && QUORUMBUS_UI=1 QUORUMBUS_UI_ARTIFACTS=$(UI_ARTIFACTS) $(GO) test -count=1 -timeout 10m -v ./...
