# Two commands for a fresh machine: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m lakevilla.demo

test: $(STAMP)
	$(PY) -m ruff check lakevilla benchmarks tests
	$(PY) -m mypy lakevilla
	$(PY) -m pytest -q -n 3 --dist loadgroup --durations=25

lint: $(STAMP)
	$(PY) -m ruff check lakevilla benchmarks tests
	$(PY) -m mypy lakevilla

bench: $(STAMP)
	$(PY) -m benchmarks.costs
	$(PY) -m benchmarks.tables
	$(PY) -m benchmarks.isolation
	$(PY) -m benchmarks.ycsb
	$(PY) -m benchmarks.tpcc
	$(PY) -m benchmarks.spark_insert
	$(PY) -m benchmarks.reads

clean:
	rm -rf $(VENV) demo-lake results .pytest_cache
