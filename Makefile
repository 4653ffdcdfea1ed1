# The single entry point: the README's two commands and .ci/run call these targets.
# Each target does its own setup into .venv and is cheap the second time (stamp files).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the venv's bin first: DeepSpeed JIT-builds its CPU ops with the ninja installed there
export PATH := $(abspath $(VENV))/bin:$(PATH)
RUST_SOURCES := $(wildcard rust/src/*.rs) Cargo.toml Cargo.lock

.PHONY: setup demo test lint lint-rust lint-python test-rust test-python bench clean

# Python dependencies, pinned in pyproject.toml (pip's cache makes a reinstall fast).
$(VENV)/.deps: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
	print('\n'.join(p['dependencies'] + p['optional-dependencies']['test']))" > $(VENV)/requirements.txt
	$(PY) -m pip install -q -r $(VENV)/requirements.txt
	touch $@

# The Rust extension, built in release mode and installed editable (python/ is on the path).
$(VENV)/.native: $(VENV)/.deps $(RUST_SOURCES)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q
	touch $@

setup: $(VENV)/.native

demo: setup
	$(VENV)/bin/curriculum-ds demo

lint-rust:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings

lint-python: setup
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(VENV)/bin/mypy python/curriculum_ds
	$(PY) -m mypy.stubtest curriculum_ds._native $(if $(wildcard .mypy-stubtest-allowlist),--allowlist .mypy-stubtest-allowlist)

lint: lint-rust lint-python

test-rust:
	cargo test --release

test-python: setup
	$(VENV)/bin/pytest -q

test: lint test-rust test-python

bench: setup
	$(PY) bench/bench_kernels.py --sizes 1e6,1e7

clean:
	rm -rf $(VENV) target
