# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.hopgraph-installed

.PHONY: install demo test docs bench dist clean

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

# The documentation site (docs/*.md and the API reference from the docstrings), warnings as errors;
# `make test` runs the same build (tests/docs/test_docs_build.py). Open docs/_build/html/index.html.
docs: install
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html

# The sdist and the wheel in dist/ (tests/test_packaging.py builds both and installs the wheel into a
# fresh venv).
dist: install
	$(PY) -m build --outdir dist .

# The benchmarks of bench/ that finish in minutes here (bench_scale.py and
# bench_serve.py are run by hand: see README).
bench: install
	$(PY) -m hopgraph bench --quick
	$(PY) bench/bench_gain_knn.py
	$(PY) bench/bench_ppr.py
	$(PY) bench/bench_dmar.py
	$(PY) bench/results_table.py

clean:
	rm -rf $(VENV) .hopgraph-cache *.egg-info build dist docs/_build docs/api
