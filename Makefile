# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.hopgraph-installed

.PHONY: install demo test bench clean

install: $(STAMP)

# torch first (the pinned CPU build lies on disk), then the package and its extras.
$(STAMP): pyproject.toml setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check torch==2.13.0
	$(PIP) install -q --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

demo: install
	$(PY) -m hopgraph demo

test: install
	$(PY) -m pytest -q tests

bench: install
	$(PY) bench/bench_gain_knn.py

clean:
	rm -rf $(VENV) .hopgraph-cache *.egg-info
