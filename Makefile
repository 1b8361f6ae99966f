# Perimeter. `make lab` brings up a local demo; `make test` runs everything.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/perimeter-ingress/perimeter/internal/app.Version=$(VERSION)
BIN       := bin/perimeter
STATICCHECK_VERSION := v0.6.1
NFPM_VERSION := v2.45.2
TOOLS     := $(shell $(GO) env GOPATH)/bin

.PHONY: all build test test-short lint bench fuzz lab clean testbed package package-lint conformance

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/perimeter

# The real API server and etcd, built once from the module proxy and cached
# outside the work tree.
testbed:
	@internal/testenv/tools/build.sh >/dev/null

# Tests append the numbers they measure (failed requests, durations,
# scores) to TEST_REPORT: go test shows nothing of a package that passes.
TEST_REPORT := $(CURDIR)/dist/test-report.txt

test: testbed
	@rm -f $(TEST_REPORT)
	PERIMETER_TEST_REPORT=$(TEST_REPORT) $(GO) test -count=1 -timeout 40m ./...
	@cat $(TEST_REPORT) 2>/dev/null || true
	$(GO) test -run '^$$' -fuzz FuzzAnnotations -fuzztime 5s ./internal/model

# The whole Gateway API conformance suite against the daemon on the test bed
# (`make test` runs a subset): the suite's report goes to
# dist/conformance-report.yaml, its summary per profile to
# dist/conformance-summary.txt. Fails while any test of the suite fails;
# the report is written either way.
CONFORMANCE_REPORT := $(CURDIR)/dist/conformance-report.yaml
CONFORMANCE_SUMMARY := $(CURDIR)/dist/conformance-summary.txt

conformance: testbed
	@rm -f $(CONFORMANCE_REPORT) $(CONFORMANCE_SUMMARY)
	@PERIMETER_CONFORMANCE=full PERIMETER_CONFORMANCE_REPORT=$(CONFORMANCE_REPORT) \
		PERIMETER_TEST_REPORT=$(CONFORMANCE_SUMMARY) PERIMETER_VERSION=$(VERSION) \
		$(GO) test -count=1 -timeout 90m -run '^TestGatewayConformance$$' ./internal/e2e; \
		status=$$?; cat $(CONFORMANCE_SUMMARY) 2>/dev/null; exit $$status

test-short:
	$(GO) test -short ./...

lint:
	@test -z "$$(gofmt -l cmd internal packaging)" || { gofmt -l cmd internal packaging; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	@test -x $(TOOLS)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(TOOLS)/staticcheck ./...

bench: testbed
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 40m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzAnnotations -fuzztime 60s ./internal/model

# dist/perimeter_<version>-1_amd64.deb and dist/perimeter-<version>-1.x86_64.rpm
# (packaging/). `make package VERSION=1.2.3` sets the version; the default
# comes from git.
package:
	@test -x $(TOOLS)/nfpm || $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	@VERSION='$(if $(filter file,$(origin VERSION)),,$(VERSION))' GO='$(GO)' MAKE='$(MAKE)' NFPM='$(TOOLS)/nfpm' packaging/build.sh

# lintian --pedantic and rpmlint on what `make package` built; fails on any
# lintian error or warning and any rpmlint error.
package-lint: package
	packaging/lint.sh

lab: testbed build
	$(GO) run ./internal/testenv/lab --perimeter $(BIN)

clean:
	rm -rf bin dist
