# opstatus: `make test` runs every test (it installs the pinned npm packages
# and starts the local servers it needs), `make test-short` the unit tests
# alone; `make run` runs the whole system on this machine.
GO      ?= go
GOFLAGS ?= -buildvcs=false
# Go 1.26.8, which these machines have, carries vulnerabilities in net/http,
# crypto/tls and crypto/x509 that govulncheck finds reachable; the go command
# fetches this patch release from the module proxy on first use (about 10 s).
GOTOOLCHAIN ?= go1.26.10
export GOFLAGS GOTOOLCHAIN

.PHONY: build test test-short run bench fuzz vet clean func-start vuln

## build: the custom-handler binary ./handler (linux/amd64, no cgo)
build:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o handler .

## package: dist/opstatus.zip, the deployment package as Core Tools builds it
## for a custom handler: what .funcignore lets in, the handler with mode 0777
## (host.json names it), host.json and the function.json files with 0666
.PHONY: package
package: build
	$(GO) run ./dev/package -o dist/opstatus.zip

## test: gofmt and vet, then every unit and integration test (promtool's
## on the alert rules among them)
test: build promtool
	@unformatted="$$(gofmt -l .)"; test -z "$$unformatted" || { echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; }
	$(GO) vet ./...
	cd dev/remotewritesink/receiver && $(GO) vet ./...
	PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -timeout 25m ./...

## test-short: the unit tests alone, in under a minute: no Node.js, no
## servers (the tests that need them skip under -short; the promtool tests
## run when `make promtool` has installed it)
test-short:
	PROMTOOL=$(wildcard $(PROMTOOL)) $(GO) test -short -count=1 ./...

## promtool: Prometheus's promtool at a pinned version, built from its
## module (Prometheus 3.16; ARO-HCP's CI uses a 3.x too) into a cache
## outside the repository, for deploy's alert-rule and dashboard tests;
## without the service discovery plugins, which rule tests never use. Once
## per machine, about 4 CPU-minutes and 1.3 GB of modules. A pinned Debian
## package would take 15 s, but it is 2.42 and leaves the archive at each
## point release.
PROMTOOL_VERSION := v0.316.0
PROMTOOL         := $(HOME)/.cache/opstatus/promtool-$(PROMTOOL_VERSION)/promtool
.PHONY: promtool
promtool: $(PROMTOOL)
$(PROMTOOL):
	GOBIN=$(dir $(PROMTOOL)) $(GO) install -tags remove_all_sd -trimpath -ldflags='-s -w' \
	  github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

## run: the local stack (Azurite, Cosmos server, Cluster Service simulator,
## host emulator) driving the built handler over demo operations
run: build
	$(GO) run ./dev/run $(RUN_ARGS)

## bench: the benchmark harness (prints figures; see BENCHMARKS.md)
bench: build
	$(GO) run ./dev/bench

## fuzz: a short run of every fuzz target (the seed corpora run in `make test`)
fuzz:
	$(GO) test ./functions -run '^$$' -fuzz FuzzQueueMessage -fuzztime 30s
	$(GO) test ./functions -run '^$$' -fuzz FuzzDecodeEnvelope -fuzztime 30s
	$(GO) test ./internal/queuemsg -run '^$$' -fuzz FuzzDecode -fuzztime 30s
	$(GO) test ./internal/clusterservice -run '^$$' -fuzz FuzzParseInternalID -fuzztime 30s
	$(GO) test ./internal/clusterservice -run '^$$' -fuzz FuzzClientRequests -fuzztime 30s

clean:
	rm -rf handler dist

## func-start: like run, under the real Functions host (needs Azure Functions
## Core Tools, which cannot be installed on the development machines)
func-start: build
	$(GO) run ./dev/run --func

## vuln: govulncheck at a pinned version against a pinned copy of the Go
## vulnerability database (the module golang.org/x/vulndb, indexed locally:
## vuln.go.dev is out of reach here)
GOVULNCHECK_VERSION := v1.9.0
VULNDB_VERSION      := v0.0.0-20261105234957-e22db6528018
VULNDB_DIR          := $(HOME)/.cache/opstatus/vulndb-$(VULNDB_VERSION)
vuln:
	@test -f $(VULNDB_DIR)/index/db.json || { \
	  $(GO) mod download golang.org/x/vulndb@$(VULNDB_VERSION) && \
	  $(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) \
	    -vulns "$$($(GO) env GOMODCACHE)/golang.org/x/vulndb@$(VULNDB_VERSION)/data/osv" -out $(VULNDB_DIR).tmp && \
	  rm -rf $(VULNDB_DIR) && mv $(VULNDB_DIR).tmp $(VULNDB_DIR); }
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) -db file://$(VULNDB_DIR) ./...
