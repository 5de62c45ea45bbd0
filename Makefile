# `make demo` and `make test` set everything up on a fresh machine: a .venv, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Stamp files: reinstall only when pyproject.toml changes.
DEV := $(VENV)/.dev-installed

export SDL_VIDEODRIVER ?= dummy
export SDL_AUDIODRIVER ?= dummy

.PHONY: demo test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(DEV): pyproject.toml | $(PY)
	$(PIP) install -q -e ".[dev,image]"
	touch $@

demo: $(DEV)
	$(PY) -m ragen_envs.demo

# pytest exits 5 when it collected no test: that is a failure too.
test: $(DEV)
	$(PY) -m pytest; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; fi; exit $$status

lint: $(DEV)
	$(PY) -m flake8 ragen_envs trainers benchmarks tests

bench: $(DEV)
	$(PY) benchmarks/env_throughput.py

clean:
	rm -rf $(VENV) demo_out build *.egg-info
