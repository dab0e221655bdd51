# Leasehold build, test and benchmark targets.
GO ?= go
PKGS ?= ./...
# Benchmarks run once each at fixed sizes; see docs/benchmarks.md.
BENCHTIME ?= 2s

.PHONY: test test-short bench vet fmt build tools

## test: the full test suite with the race detector (installs redis-server if missing and root)
test: tools
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## test-short: without the race detector, for quick iterations
test-short: tools
	$(GO) test -count=1 -short $(PKGS)

## bench: the benchmarks recorded in docs/benchmarks.md
bench: tools
	$(GO) run ./cmd/benchreport -benchtime $(BENCHTIME)

tools:
	@./scripts/ensure-redis.sh

build:
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')
