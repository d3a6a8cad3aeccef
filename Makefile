# airflow-lance developer commands. Every target bootstraps .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help demo test stress bench bench-object-store protos clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## run the ingest example DAG (`airflow dags test`, Spark local[2]) and print what it did
	$(PY) -m airflow_lance.demo

# Azurite and dynalite (Azure / DynamoDB test servers) from npm, pinned by the lock file.
# Without npm their tests skip.
NPM_DIR   := tests/object_stores/npm
NPM_STAMP := $(NPM_DIR)/node_modules/.installed

$(NPM_STAMP): $(NPM_DIR)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --no-audit --no-fund --loglevel=error --prefix $(NPM_DIR) && touch $@; \
	else echo "npm not found: Azure and DynamoDB tests will be skipped"; fi

# Two workers (pytest-xdist), each running whole test files: Spark jobs wait on their JVMs much of
# the time, so two files at once keep both cores busy.
test: $(STAMP) $(NPM_STAMP)  ## run the test suite
	$(PY) -m pytest -q -n 2 --dist loadfile

stress: $(STAMP) $(NPM_STAMP)  ## long stress runs (crash trials, many writers)
	$(PY) -m pytest -q -m slow --run-slow

bench: $(STAMP)  ## benchmarks against pylance and Spark, one script per area (prints ratios)
	$(PY) bench/bench_format.py
	$(PY) bench/bench_formats_v2x.py
	$(PY) bench/bench_commits.py
	$(PY) bench/bench_maintenance.py
	$(PY) bench/bench_indices.py
	$(PY) bench/bench_spark_write.py
	$(PY) bench/bench_spark_read.py

bench-object-store: $(STAMP)  ## commit latency and write throughput on SeaweedFS (S3), ours vs pylance
	$(PY) bench/bench_object_store.py

protos: $(STAMP)  ## regenerate airflow_lance/core/_proto from protos/
	$(PY) protos/generate.py

clean:
	rm -rf $(VENV) build *.egg-info
