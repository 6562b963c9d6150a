# open-bot computer. `make run` starts the computer; `make test` tests it.
SHELL := /bin/bash
GO ?= go
PKGS := ./apps/botd/... ./apps/worker/... ./pkg/shared/...
IMAGE ?= open-bot/computer:dev
WORKER_IMAGE_TAG ?= open-bot/worker:dev
STATE_DIR ?= $(HOME)/.open-bot
TEST_TIMEOUT ?= 75m
# One Go build configuration for every go command make runs (make build,
# go vet, the tests and the programs they build, the image's binaries):
# -trimpath, and the pure-Go resolver and user lookup the image's static
# binaries need. Go's build cache then compiles each package once per
# machine, not once per set of flags, and a clone at another path reuses it.
# -ldflags=-w: no DWARF (stack traces and pprof keep their symbols): make
# test links about 150 binaries (test binaries, and the programs tests
# build), and -w takes a third off each link (apps/worker's test binary:
# 14 s of CPU, 9 s with -w). A go command's own -ldflags replaces it.
GO_BUILD_FLAGS ?= -trimpath -tags=osusergo,netgo -ldflags=-w
export GOFLAGS := $(strip $(GOFLAGS) $(GO_BUILD_FLAGS))

.PHONY: build test test-live bench run image worker-image lint fmt clean

build: bin/botd bin/worker

bin/botd: FORCE
	$(GO) build -o bin/botd ./apps/botd

bin/worker: FORCE
	$(GO) build -o bin/worker ./apps/worker

FORCE:

# scripts/test.sh: as root on Debian it first installs and starts what the
# tests use (provision.sh, a Docker engine, Postgres, the image); then vet
# and every test. Integration tests need root and the desktop tools; under
# CI=true a missing tool fails instead of skipping.
test:
	GO=$(GO) IMAGE=$(IMAGE) TEST_TIMEOUT=$(TEST_TIMEOUT) PKGS="$(PKGS)" ./scripts/test.sh

# The acceptance runs with a real vision model (never in CI): set
# LIVE_MODEL_BASE_URL (an OpenAI-compatible Responses API), LIVE_MODEL_KEY and LIVE_MODEL.
# TestLiveModel: an attached botd; TestLiveModelReplace: a local computer made
# by the worker, destroyed and replaced from its checkpoint;
# TestLiveModelE2BDesktop (also needs E2B_API_KEY, else it skips): a
# worker-runtime run on a real E2B desktop sandbox, the page served inside it.
test-live: build
	$(GO) test -count=1 -v -run '^TestLiveModel(Replace|E2BDesktop)?$$' -timeout 40m ./apps/worker/

bench:
	./scripts/bench.sh

# The benchmarks that carry a goal (egress vs socat, observe vs scrot, browser
# cold start vs bare Chromium, cookie sync vs parallel getCookies, pool
# hand-out), each figure beside its goal (scripts/bench-check.sh); exits
# non-zero naming each miss. Not part of `make test`: run it on a quiet
# machine after a change to one of those paths. BENCH_CHECK_FROM=<file>
# re-checks a saved run's output.
.PHONY: bench-check
bench-check:
	./scripts/bench-check.sh

run:
	./scripts/run.sh

image:
	IMAGE=$(IMAGE) ./scripts/build-image.sh

# The worker's own image (WORKER_IMAGE_TAG, default open-bot/worker:dev): the
# static worker FROM scratch, no registry; deploy/ runs it
# (scripts/build-worker-image.sh; docs/operations.md).
worker-image:
	WORKER_IMAGE_TAG=$(WORKER_IMAGE_TAG) ./scripts/build-worker-image.sh

lint:
	@out=$$(gofmt -l apps pkg); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fmt:
	gofmt -w apps pkg

clean:
	rm -rf bin
