# Set-up-and-run targets. Every target creates the virtualenv when needed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
ARGS ?=

.PHONY: run test docs race bench load check-feed clean dist

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools<81" wheel

$(STAMP_RUN): $(BIN)/python setup.py
	$(BIN)/python -m pip install --quiet -e '.[embedded,client,fast]'
	touch $@

$(STAMP_TEST): $(BIN)/python setup.py
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(BIN)/openprocurement-feed run $(ARGS)

test: $(STAMP_TEST)
	$(BIN)/python -m pytest $(ARGS)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

docs: $(STAMP_TEST)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html
	@echo "Docs: docs/_build/html/index.html"

race: $(STAMP_RUN)
	$(BIN)/openprocurement-feed race $(ARGS)

check-feed: $(STAMP_RUN)
	$(BIN)/openprocurement-feed check $(ARGS)

bench: $(STAMP_TEST)
	$(BIN)/python -m benchmarks $(ARGS)

load: $(STAMP_TEST)
	$(BIN)/python -m benchmarks load $(ARGS)

dist: $(STAMP_TEST)
	$(BIN)/python -m pip install --quiet build
	$(BIN)/python -m build

clean:
	rm -rf $(VENV) build dist *.egg-info docs/_build .pytest_cache
