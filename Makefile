# Leasehold build, test and benchmark targets.
GO ?= go
PKGS ?= ./...

.PHONY: test test-short bench vet fmt build tools

## test: the full test suite with the race detector (installs redis-server if missing and root)
test: tools
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## test-short: without the race detector, for quick iterations
test-short: tools
	$(GO) test -count=1 -short $(PKGS)

## bench: the report benchmarks recorded in docs/benchmarks.md (each backend
## against a baseline measured in the same run); BENCH_PHASE sets each phase's length
BENCH_PHASE ?= 2s
bench: tools
	LEASEHOLD_BENCH_PHASE=$(BENCH_PHASE) $(GO) test -run '^$$' -bench '^BenchmarkReport$$' -benchtime 1x -timeout 60m \
		./internal/ledger/redis/ ./internal/ledger/etcd/

tools:
	@./scripts/ensure-redis.sh

build:
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')
