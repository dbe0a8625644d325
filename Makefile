# Two commands do all set-up on a fresh clone: `make prove` and `make test`.
# The venv is made once and reused; a stamp per extra makes re-runs no-ops.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: prove test lint gate compat mutation clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The prover needs no torch: core dependencies only.
$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

# Engines under test come without their GPU stacks: --no-deps, pinned in engines/requirements.txt.
$(VENV)/.test: pyproject.toml engines/requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps -r engines/requirements.txt
	touch $@ $(VENV)/.core

# vLLM's planner without its CUDA stack (about 50 s and 1.2 GB with a warm pip cache; the wheel
# is 336 MB): `verify engine vllm` and its tests need it, so `make test` installs it.
$(VENV)/.vllm: engines/vllm-requirements.txt | $(VENV)/.test
	$(BIN)/python -m pip install -q --no-deps -r engines/vllm-requirements.txt
	touch $@

# SGLang's pool modules without its CUDA stack (the wheel is 39 MB; engines/sglang-requirements.txt):
# `verify engine sglang` and its tests need it, so `make test` installs it.
$(VENV)/.sglang: engines/sglang-requirements.txt | $(VENV)/.test
	$(BIN)/python -m pip install -q --no-deps -r engines/sglang-requirements.txt
	touch $@

prove: $(VENV)/.core
	$(BIN)/verify prove --model kimi-k3

test: $(VENV)/.test $(VENV)/.vllm $(VENV)/.sglang
	$(BIN)/pytest -n auto -p no:cacheprovider $(PYTEST_ARGS)

lint: $(VENV)/.test $(VENV)/.vllm $(VENV)/.sglang
	$(BIN)/ruff check .
	$(BIN)/mypy

gate: $(VENV)/.test $(VENV)/.vllm $(VENV)/.sglang
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m kvproof.ci.gate

# The compatibility matrix (docs/engines/compatibility.md, generated): every vLLM and tokenspeed release
# the adapters follow, from the index; TOKENSPEED_GIT=DIR (a tokenspeed git directory) adds its revisions.
compat: $(VENV)/.test $(VENV)/.vllm
	$(BIN)/python -m kvproof.ci.compat $(if $(TOKENSPEED_GIT),--tokenspeed-git $(TOKENSPEED_GIT))

# Mutation testing of impl/ and spec/ (docs/testing.md); mutmut is not in the test extra.
MUTATION_ARGS ?= --sample 1 --budget-min 60
$(VENV)/.mutation: ci/mutation-requirements.txt $(VENV)/.test
	$(BIN)/python -m pip install -q -r ci/mutation-requirements.txt
	touch $@

mutation: $(VENV)/.mutation
	nice $(BIN)/python -m kvproof.ci.mutation $(MUTATION_ARGS)

clean:
	rm -rf $(VENV) .hypothesis .mypy_cache reports mutants
