# open-bot computer. `make run` starts the computer; `make test` tests it.
SHELL := /bin/bash
GO ?= go
PKGS := ./apps/botd/... ./apps/worker/... ./pkg/shared/...
IMAGE ?= open-bot/computer:dev
STATE_DIR ?= $(HOME)/.open-bot
TEST_TIMEOUT ?= 75m

.PHONY: build test test-live bench run image lint fmt clean

build: bin/botd bin/worker

bin/botd: FORCE
	$(GO) build -o bin/botd ./apps/botd

bin/worker: FORCE
	$(GO) build -o bin/worker ./apps/worker

FORCE:

# Integration tests need root and the desktop tools (scripts/provision.sh);
# under CI=true a missing tool fails instead of skipping.
# Where an engine answers, the image is built first (seconds when nothing
# changed), so every package that runs it (imagetest, the Docker provider)
# finds it; without one, those tests skip (fail under CI=true).
test: build
	$(GO) vet $(PKGS)
	@if docker info >/dev/null 2>&1; then IMAGE=$(IMAGE) ./scripts/build-image.sh; else echo "make test: no Docker engine answers; the image tests skip (fail under CI=true)"; fi
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# The acceptance runs with a real vision model (never in CI): set
# LIVE_MODEL_BASE_URL (an OpenAI-compatible Responses API), LIVE_MODEL_KEY and LIVE_MODEL.
# TestLiveModel: an attached botd; TestLiveModelReplace: a local computer made
# by the worker, destroyed and replaced from its checkpoint.
test-live: build
	$(GO) test -count=1 -v -run '^TestLiveModel(Replace)?$$' -timeout 20m ./apps/worker/

bench: build
	./scripts/bench.sh

run:
	./scripts/run.sh

image:
	IMAGE=$(IMAGE) ./scripts/build-image.sh

lint:
	@out=$$(gofmt -l apps pkg); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fmt:
	gofmt -w apps pkg

clean:
	rm -rf bin
