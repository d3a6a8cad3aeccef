# airflow-lance developer commands. Every target bootstraps .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help demo test stress bench protos clean

help:  ## list targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## run the example pipeline end to end and print what it did
	$(PY) -m airflow_lance.demo

test: $(STAMP)  ## run the test suite
	$(PY) -m pytest -q

stress: $(STAMP)  ## long stress runs (crash trials, many writers)
	$(PY) -m pytest -q -m slow --run-slow

bench: $(STAMP)  ## benchmarks against pylance (prints ratios)
	$(PY) bench/bench_format.py

protos: $(STAMP)  ## regenerate airflow_lance/core/_proto from protos/
	$(PY) protos/generate.py

clean:
	rm -rf $(VENV) build *.egg-info
