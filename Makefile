# Leasehold build, test and benchmark targets.
GO ?= go
PKGS ?= ./...

.PHONY: test test-scenarios test-short bench fuzz vet fmt build tools

## test: the full test suite with the race detector (installs redis-server if missing and root)
test: tools
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## test-scenarios: the slower scenario tests .ci/run runs after test: every
## chaos scenario on the memory and Redis ledgers both (make test runs each
## on the one its file names) and on an etcd ledger, the conformance suite
## through a reserver on Redis, token-rate in full (2 minutes) on the
## reserver, Redis and etcd, and the store topologies under load (Redis
## Sentinel failovers, a sharded Redis Cluster, a three-member etcd: the
## TestTopology* tests, behind LEASEHOLD_TEST_TOPOLOGIES)
TOPOLOGY_PKGS ?= ./chaos/ ./internal/ledger/redis/ ./internal/ledger/etcd/ ./internal/testutil/redisserver/ ./internal/testutil/etcdserver/
test-scenarios: tools
	LEASEHOLD_TEST_SCENARIOS_ALL=1 LEASEHOLD_TEST_SCENARIOS_ETCD=1 $(GO) test -race -count=1 -timeout 40m -run '^(TestScenariosShort|TestScenariosShortEtcd|TestTokenRateFull)$$' ./chaos/
	LEASEHOLD_TEST_SCENARIOS_ALL=1 $(GO) test -race -count=1 -timeout 20m -run '^TestConformanceRedis$$' ./internal/reserver/rpc/roundtrip/
	LEASEHOLD_TEST_TOPOLOGIES=1 $(GO) test -race -count=1 -p 1 -timeout 30m -run '^TestTopology' $(TOPOLOGY_PKGS)

## test-short: without the race detector, for quick iterations
test-short: tools
	$(GO) test -count=1 -short $(PKGS)

## bench: the report benchmarks recorded in docs/benchmarks.md (each backend
## against a baseline measured in the same run); BENCH_PHASE sets each phase's length
BENCH_PHASE ?= 2s
bench: tools
	LEASEHOLD_BENCH_PHASE=$(BENCH_PHASE) $(GO) test -run '^$$' -bench '^BenchmarkReport$$' -benchtime 1x -timeout 60m \
		./internal/ledger/redis/ ./internal/ledger/etcd/ ./internal/route/ ./chaos/ ./internal/capacity/

## fuzz: the gRPC surface's fuzz target (every method, every kind of caller,
## against a memory ledger) for FUZZTIME; its seeds also run in make test
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLedgerService$$' -fuzztime $(FUZZTIME) ./internal/reserver/rpc/

tools:
	@./scripts/ensure-redis.sh

build:
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

## proto: regenerate internal/gen/leaseholdv1 from proto/ (needs protoc:
## apt-get install -y protobuf-compiler; the plugins are pinned here)
PROTOC_GEN_GO_VERSION ?= v1.36.11
PROTOC_GEN_GO_GRPC_VERSION ?= v1.5.1
PROTO_BIN := $(CURDIR)/bin/proto
.PHONY: proto
proto:
	GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(PROTO_BIN):$$PATH protoc -I proto \
		--go_out=. --go_opt=module=github.com/leasehold/leasehold \
		--go-grpc_out=. --go-grpc_opt=module=github.com/leasehold/leasehold \
		leasehold/v1/ledger.proto
