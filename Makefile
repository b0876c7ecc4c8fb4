# opstatus: `make test` runs every test (it installs the pinned npm packages
# and starts the local servers it needs); `make run` runs the whole system on
# this machine.
GO      ?= go
GOFLAGS ?= -buildvcs=false
export GOFLAGS

.PHONY: build test run bench fuzz vet clean func-start

## build: the custom-handler binary ./handler (linux/amd64, no cgo)
build:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o handler .

## test: vet, then every unit and integration test
test: build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 25m ./...

## run: the local stack (Azurite, Cosmos server, Cluster Service simulator,
## host emulator) driving the built handler over demo operations
run: build
	$(GO) run ./dev/run

## bench: the benchmark harness (prints figures; see BENCHMARKS.md)
bench: build
	$(GO) run ./dev/bench

## fuzz: a short run of every fuzz target (the seed corpora run in `make test`)
fuzz:
	$(GO) test ./functions -run '^$$' -fuzz FuzzQueueMessage -fuzztime 30s
	$(GO) test ./internal/clusterservice -run '^$$' -fuzz FuzzParseInternalID -fuzztime 30s

clean:
	rm -f handler

## func-start: like run, under the real Functions host (needs Azure Functions
## Core Tools, which cannot be installed on the development machines)
func-start: build
	$(GO) run ./dev/run --func
