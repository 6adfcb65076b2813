# All targets create .venv on demand: torch first (pinned CPU build), then ebms with extras.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
BIN := $(VENV)/bin
comma := ,
STAMP := $(VENV)/.ebms-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo test test-slow test-public-paths test-all lint bench bench-quick docs docs-images transcripts clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

demo: $(STAMP)
	$(BIN)/ebms demo

# the default suite: everything not marked slow, on TEST_WORKERS pytest-xdist processes (kept under
# 4 minutes on 2 idle cores; TEST_WORKERS=0 runs it in one process)
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS)

# only the tests marked slow; pytest's exit status 5 ("no tests collected") counts as success here
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow || { rc=$$?; test $$rc -eq 5 && echo "no tests marked slow"; test $$rc -eq 5; }

# the nets and samplers again with every private-PyTorch speed path switched off (the route another
# torch version, CPU or device takes when a path's import-time check fails)
test-public-paths: $(STAMP)
	EBMS_DISABLE_FAST_PATHS=1 $(BIN)/python -m pytest -q -m "not slow" tests/nets tests/samplers tests/test_energy.py

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
	rm -rf $(VENV) site build src/*.egg-info
