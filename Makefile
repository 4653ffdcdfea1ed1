# The single entry point: the README's two commands and .ci/run call these targets.
# Each target does its own setup into .venv and is cheap the second time (stamp files).
SHELL := /bin/bash
# every recipe line fails on the first failing command, inside pipelines too
.SHELLFLAGS := -e -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the venv's bin first: DeepSpeed JIT-builds its CPU ops with the ninja installed there
export PATH := $(abspath $(VENV))/bin:$(PATH)
RUST_SOURCES := $(wildcard rust/src/*.rs) Cargo.toml Cargo.lock
# Set-up steps print one line each; their own output (pip's ~120 "Requirement already satisfied"
# lines, cargo, maturin) goes to SETUP_LOG. A failing step prints the log's last lines and its
# path, and fails the target.
SETUP_LOG := $(VENV)/setup.log
STEP_FN = step() { \
	  echo "$$1"; mkdir -p $(VENV); echo "==> $$(date '+%F %T') $$1: $${*:2}" >> $(SETUP_LOG); \
	  "$${@:2}" >> $(SETUP_LOG) 2>&1 && return 0; \
	  echo "failed: $$1; the last lines of its log:" >&2; tail -n 30 $(SETUP_LOG) >&2; \
	  echo "full log: $(abspath $(SETUP_LOG))" >&2; return 1; \
	}
STEP = $(STEP_FN); step

.PHONY: setup demo test test-fast lint lint-rust lint-python test-rust test-python bench clean

# Python dependencies, pinned in pyproject.toml (pip's cache makes a reinstall fast).
$(VENV)/.deps: pyproject.toml
	@$(STEP_FN); test -x $(PY) || step "setup: creating the virtual environment $(VENV)" $(PYTHON) -m venv $(VENV)
	@$(STEP) "setup: updating pip" $(PY) -m pip install --upgrade pip
	@$(PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
	print('\n'.join(p['dependencies'] + p['optional-dependencies']['test']))" > $(VENV)/requirements.txt
	@$(STEP) "setup: installing the pinned Python packages (torch, deepspeed, ...; a few minutes \
	the first time; log: $(SETUP_LOG))" $(PY) -m pip install --progress-bar off -r $(VENV)/requirements.txt
	@touch $@

# The Rust extension, built in release mode and installed editable (python/ is on the path).
$(VENV)/.native: $(VENV)/.deps $(RUST_SOURCES)
	@$(STEP) "setup: building the Rust extension (cargo --release) and installing curriculum_ds \
	editable" env VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release
	@touch $@

# DeepSpeed's CPU ops (fused Adam, the CPU accelerator's shared-memory all-reduce) are JIT-built
# on first use into this environment's own folder (curriculum_ds.distributed.torch_extensions_dir):
# built here once (~2 min on 2 cores), not by the first run or test that needs them. Skipped with
# CUDA (a GPU machine builds its own ops on first use).
DS_OPS_PY := import os, torch; from curriculum_ds.distributed import set_deepspeed_env; \
	cuda = torch.cuda.is_available(); set_deepspeed_env(os.environ, cuda=cuda); \
	from deepspeed.accelerator import get_accelerator; \
	[get_accelerator().create_op_builder(n).load() for n in ("FusedAdamBuilder", "ShareMemCommBuilder") if not cuda]
$(VENV)/.ds_ops: $(VENV)/.native
	@$(STEP) "setup: building DeepSpeed's CPU ops once (fused Adam, shared-memory all-reduce; \
	about 2 minutes the first time)" $(PY) -c '$(DS_OPS_PY)'
	@touch $@

setup: $(VENV)/.native $(VENV)/.ds_ops

demo: setup
	$(VENV)/bin/curriculum-ds demo

lint-rust:
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --all-targets --features python -- -D warnings

lint-python: setup
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(VENV)/bin/mypy python/curriculum_ds
	$(PY) -m mypy.stubtest curriculum_ds._native $(if $(wildcard .mypy-stubtest-allowlist),--allowlist .mypy-stubtest-allowlist)

lint: lint-rust lint-python

test-rust:
	cargo test --release --quiet

# everything, unit and multi-rank integration tiers; prints the 30 slowest tests (CI's log)
test-python: setup
	$(VENV)/bin/pytest -q --durations=30

# the quick loop: the unit tier alone (in-process, no launched ranks), about a minute
test-fast: setup
	$(VENV)/bin/pytest -q -m "not distributed" --durations=10 tests/unit

test: lint test-rust test-python

bench: setup
	$(VENV)/bin/curriculum-ds bench --sizes 1e6,1e7

clean:
	rm -rf $(VENV) target
