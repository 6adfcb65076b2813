# All targets create .venv on demand: torch first (pinned CPU build), then ebms with extras.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
BIN := $(VENV)/bin
comma := ,
STAMP := $(VENV)/.ebms-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo test test-all lint bench bench-quick docs clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

demo: $(STAMP)
	$(BIN)/ebms demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

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
