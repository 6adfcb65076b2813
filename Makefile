# All targets create .venv on demand: torch first (a CPU build where one can be had), then ebms with extras.
PYTHON ?= python3
VENV ?= .venv
# the newest PyTorch release, tested with everything (`make test`, the slow set, lint)
TORCH ?= 2.15.0
TORCH_SPEC ?= torch==$(TORCH)
# the oldest release ebms supports (pyproject's torch>=2.4): `make test-public-paths` runs the nets,
# samplers and energies on it, in its own environment
TORCH_OLDEST ?= 2.4.1
VENV_OLDEST ?= .venv-oldest
# PyTorch's CPU wheels (~200 MB); where that index cannot be reached, pip falls back to the default
# index, whose Linux wheel is a CUDA build (about 3 GB with its libraries) that runs on the CPU as well
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
EXTRAS ?= dev
BIN := $(VENV)/bin
comma := ,
STAMP := $(VENV)/.ebms-$(subst $(comma),-,$(EXTRAS))-torch$(TORCH)
STAMP_OLDEST := $(VENV_OLDEST)/.ebms-torch$(TORCH_OLDEST)

# pip install torch==VERSION into the environment $(1): the CPU index first, then the default one
define install_torch
	$(1)/bin/python -m pip install -q --retries 0 --timeout 20 --index-url $(TORCH_INDEX) "torch==$(2)" >/dev/null 2>&1 \
	  || { echo "note: $(TORCH_INDEX) unreachable; torch==$(2) from the default index (a CUDA build, ~3 GB)"; \
	       $(1)/bin/python -m pip install -q "torch==$(2)"; }
endef

.PHONY: demo test test-slow test-bench test-public-paths test-all lint bench bench-quick docs docs-images transcripts clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(call install_torch,$(VENV),$(TORCH))
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

$(STAMP_OLDEST): pyproject.toml
	test -x $(VENV_OLDEST)/bin/python || $(PYTHON) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(call install_torch,$(VENV_OLDEST),$(TORCH_OLDEST))
	$(VENV_OLDEST)/bin/python -m pip install -q -e . "pytest>=8.0" "pytest-xdist==3.8.0"
	touch $@

demo: $(STAMP)
	$(BIN)/ebms demo

# the default suite: everything not marked slow, on TEST_WORKERS pytest-xdist processes (kept under
# 4 minutes on 2 idle cores; TEST_WORKERS=0 runs it in one process)
TEST_WORKERS ?= 2
# --durations=10: the ten slowest tests close the log (CI's included), to keep the budget in view
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --durations=10

# the tests marked slow but not bench, on TEST_WORKERS processes too; pytest's exit status 5 ("no tests
# collected") counts as success here
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow and not bench" -n $(TEST_WORKERS) --durations=10 || { rc=$$?; test $$rc -eq 5 && echo "no tests marked slow"; test $$rc -eq 5; }

# the checks of several minutes each (also marked slow): a docs transcript that trains a recipe to its end, an
# example at its documented budget; kept out of CI's 40 minutes, run before a release and after changing what they
# cover (`make test-all` runs them too)
test-bench: $(STAMP)
	$(BIN)/python -m pytest -q -m bench -n $(TEST_WORKERS) --durations=10 || { rc=$$?; test $$rc -eq 5 && echo "no tests marked bench"; test $$rc -eq 5; }

# the nets, samplers and energies (a) on the newest torch with every private-PyTorch speed path switched
# off (the route another torch version, CPU or device takes when a path's import-time check fails), and
# (b) on the oldest supported torch, where each path decides for itself
PUBLIC_TESTS := tests/nets tests/samplers tests/test_energy.py
test-public-paths: $(STAMP) $(STAMP_OLDEST)
	EBMS_DISABLE_FAST_PATHS=1 $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) $(PUBLIC_TESTS)
	$(VENV_OLDEST)/bin/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) -p no:cacheprovider $(PUBLIC_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

# rerun every command transcript marked in README.md and docs/*.md and rewrite it (FAST=1: not the slow ones)
transcripts: $(STAMP)
	$(BIN)/python tests/docs/test_transcripts.py --update $(if $(FAST),--fast,)

# regenerate the figures in docs/img that the examples make
docs-images: $(STAMP)
	$(BIN)/python examples/toy_gallery.py --docs
	$(BIN)/python examples/discrete_ising_tempering.py --out docs/img
	$(BIN)/python examples/rbm_digits.py --out docs/img
	$(BIN)/python examples/jrf_tagging.py --out docs/img

bench:
	$(MAKE) EXTRAS=dev,bench venv
	$(BIN)/python benchmarks/run_all.py

bench-quick:
	$(MAKE) EXTRAS=dev,bench venv
	$(BIN)/python benchmarks/run_all.py --quick

docs:
	$(MAKE) EXTRAS=dev,docs venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(VENV) $(VENV_OLDEST) site build src/*.egg-info
