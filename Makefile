# Set-up-and-run targets. Every target creates the virtualenv when needed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
STAMP_MATRIX := $(VENV)/.installed-matrix
ARGS ?=
# pytest-xdist workers of make test: twice the cores (most tests wait on a
# server, a process or a socket more than they compute); each worker starts
# an embedded server of its own. WORKERS=0 runs the suite in one process.
WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) * 2 )))
# Branch coverage of openprocurement_feed/ with the floor of pyproject.toml
# ([tool.coverage.report] fail_under). A partial run (ARGS=tests/test_x.py)
# sits below the floor: add COV= to leave coverage out.
COV ?= --cov --cov-report=term-missing:skip-covered
# The interpreters of the matrix: pyenv's, put first on the PATH so that tox
# finds python3.10 ... python3.13 without a pyenv global for each.
PYENV_ROOT ?= $(HOME)/.pyenv
empty :=
space := $(empty) $(empty)
MATRIX_PATH := $(subst $(space),:,$(strip $(wildcard $(PYENV_ROOT)/versions/3.1[0-3].*/bin)))


.PHONY: test-unit test-stress soak
.PHONY: run test lint matrix docs race bench load scale check-feed clean dist test-alerts fuzz test-ops plots faults
.PHONY: interop

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools<81" wheel

$(STAMP_RUN): $(BIN)/python setup.py
	$(BIN)/python -m pip install --quiet -e '.[embedded,client,fast]'
	touch $@

$(STAMP_TEST): $(BIN)/python setup.py pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $@ $(STAMP_RUN)

$(STAMP_MATRIX): $(STAMP_TEST)
	$(BIN)/python -m pip install --quiet -e '.[matrix]'
	touch $@

run: $(STAMP_RUN)
	$(BIN)/openprocurement-feed run $(ARGS)

# The lint first (seconds), then the tests in parallel and in random order
# (pytest-randomly prints its seed: -p randomly -p "randomly_seed=N" in ARGS
# repeats an order) with the coverage floor, then the docs.
test: $(STAMP_TEST)
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal --durations=15 $(COV) $(ARGS)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The inner loop: the tests that need no database server and start no
# process (pytest -m "not server"), in seconds; no coverage floor.
test-unit: $(STAMP_TEST)
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal -q -m "not server" --durations=5 $(ARGS)

# make test with one core kept busy by another process the whole time: the
# suite must not care how fast the machine is (its order is random anyway).
test-stress: $(STAMP_TEST)
	@$(BIN)/python -c "while True: pass" & busy=$$!; \
	trap 'kill $$busy 2>/dev/null' EXIT INT TERM; \
	echo "test-stress: a busy loop (pid $$busy) keeps one core busy"; \
	$(MAKE) --no-print-directory test

# ruff (lint, then the format check), mypy, bandit and the import contracts
# (lint-imports), configured in pyproject.toml.
lint: $(STAMP_TEST)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/bandit -q -r openprocurement_feed -c pyproject.toml
	$(BIN)/lint-imports

# schemathesis against the demo over HTTP (tests/test_fuzz.py), both feed
# orders, with many more examples than make test runs: FUZZ_EXAMPLES
# requests per operation and generation mode, FUZZ_STEPS stateful runs.
FUZZ_EXAMPLES ?= 300
FUZZ_STEPS ?= 100
fuzz: $(STAMP_TEST)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_STEPS=$(FUZZ_STEPS) $(BIN)/python -m pytest -s -q tests/test_fuzz.py $(ARGS)

# The reference fuzzer of Negentropy (hoytech/negentropy test/fuzz.pl) with
# our harness added to its harness list, ours as either side against its
# JavaScript, its delta runs (the same bytes as its own) and its protocol
# upgrade test (tests/interop/fuzz.py). NEGENTROPY_DIR: a snapshot of that
# repository (a clone, or an export of it); needs node and Debian's
# libsession-token-perl. INTEROP_ARGS="--quick" for a few small runs.
NEGENTROPY_DIR ?=
INTEROP_ARGS ?=
interop: $(STAMP_TEST)
	@if [ -z "$(NEGENTROPY_DIR)" ]; then \
		echo "make interop needs NEGENTROPY_DIR: a snapshot of hoytech/negentropy" >&2; \
		echo "(a clone of it, or an export: make interop NEGENTROPY_DIR=../negentropy)" >&2; \
		exit 2; \
	fi
	NEGENTROPY_DIR="$(NEGENTROPY_DIR)" $(BIN)/python tests/interop/fuzz.py $(INTEROP_ARGS)

# tox: Python 3.10-3.13, lint, docs and the combined coverage (tox.ini).
# ARGS picks environments and pytest arguments, e.g. ARGS="-e py310 -- tests/test_offset.py".
matrix: $(STAMP_MATRIX)
	PATH="$(MATRIX_PATH)$(if $(MATRIX_PATH),:)$$PATH" $(BIN)/tox $(ARGS)

docs: $(STAMP_TEST)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html
	@echo "Docs: docs/_build/html/index.html"

race: $(STAMP_RUN)
	$(BIN)/openprocurement-feed race $(ARGS)

check-feed: $(STAMP_RUN)
	$(BIN)/openprocurement-feed check $(ARGS)

faults: $(STAMP_RUN)
	$(BIN)/openprocurement-feed faults $(ARGS)

bench: $(STAMP_TEST)
	$(BIN)/python -m benchmarks $(ARGS)

load: $(STAMP_TEST)
	$(BIN)/python -m benchmarks load $(ARGS)

# A million tenders (docs/scale.rst): 10,000, 100,000 and 1,000,000 by
# default (ARGS="--sizes 10000,100000"); hours at a million.
scale: $(STAMP_TEST)
	$(BIN)/python -m benchmarks scale $(ARGS)

# The steady state (benchmarks/soak; docs/operations.rst, "The steady
# state"): the production shape under the seed's load for SOAK_MINUTES,
# a line of figures every minute, then each one's slope per hour after a
# 10-minute warm-up with a verdict per criterion, and the figure in
# SOAK_PLOT (SOAK_PLOT= for none). A benchmark, not a test: an hour.
SOAK_MINUTES ?= 60
SOAK_PLOT ?= docs/_static/soak.svg
soak: $(STAMP_TEST)
	SOAK_MINUTES=$(SOAK_MINUTES) $(BIN)/python -m benchmarks soak $(if $(SOAK_PLOT),--plot $(SOAK_PLOT)) $(ARGS)

# The Prometheus alert rules of ops/prometheus: syntax, then their unit tests.
# Needs promtool (Debian/Ubuntu: apt-get install prometheus; or the
# prometheus release tarball), not the virtualenv.
PROMTOOL ?= $(shell command -v promtool)
test-alerts:
	@if [ -z "$(PROMTOOL)" ]; then \
		echo "make test-alerts needs promtool, which is not installed." >&2; \
		echo "Install the Debian/Ubuntu package 'prometheus' (sudo apt-get install prometheus)," >&2; \
		echo "or set PROMTOOL=/path/to/promtool." >&2; \
		exit 2; \
	fi
	$(PROMTOOL) check rules ops/prometheus/alerts.yml
	cd ops/prometheus && $(PROMTOOL) test rules alerts_test.yml

# The production-shaped end-to-end test (ops/e2e.py; docs/deploying.rst,
# "The production-shaped test"): the demo under gunicorn with 3 workers, 2
# sequencers, writers, crawlers and a real Prometheus with the rules of
# ops/prometheus, a web worker and the sequencers killed mid-run; two to three
# minutes. Needs prometheus and promtool (Debian/Ubuntu: apt-get install
# prometheus): without them it fails with status 2, or prints a skip line
# and passes with OPS_OPTIONAL=1.
# The alert rules' unit tests (test-alerts) run first wherever promtool is.
OPS_OPTIONAL ?=
test-ops: $(STAMP_TEST)
	@if [ -n "$(PROMTOOL)" ]; then $(MAKE) --no-print-directory test-alerts; fi
	OPS_OPTIONAL="$(OPS_OPTIONAL)" PROMTOOL="$(PROMTOOL)" $(BIN)/python ops/e2e.py $(ARGS)

# The docs' figures (docs/_static), each redrawn from a new run by the
# command its page names; OPS= leaves out the production-shaped test's
# timeline (it needs prometheus, like test-ops). RECONCILE_TENDERS= leaves
# out the reconcile cost figure (at 100,000 tenders its run takes about an
# hour on the embedded database: the follower builds the aggregates first).
OPS ?= 1
RECONCILE_TENDERS ?= 100000
plots: $(STAMP_TEST)
	$(BIN)/openprocurement-feed race --duration 10 --seed 1 --plot docs/_static/race.svg
	$(BIN)/python -m benchmarks orders --order-seconds 10 --order-rounds 2 --hot-rounds 1 --docs 500 --plot docs/_static/
	$(BIN)/python -m openprocurement_feed.plots shape docs/_static/production-shape.svg
	@if [ -n "$(OPS)" ]; then PROMTOOL="$(PROMTOOL)" $(BIN)/python ops/e2e.py --plot docs/_static/ops-timeline.svg; fi
	@if [ -n "$(RECONCILE_TENDERS)" ]; then $(BIN)/python -m benchmarks reconcile-client --no-scenario \
		--reconcile-tenders $(RECONCILE_TENDERS) --plot docs/_static/reconcile-cost.svg; fi

dist: $(STAMP_TEST)
	$(BIN)/python -m pip install --quiet build
	$(BIN)/python -m build

clean:
	rm -rf $(VENV) build dist *.egg-info docs/_build .pytest_cache .tox .mypy_cache .ruff_cache .coverage .coverage.* htmlcov coverage.xml
