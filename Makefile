# Two commands for a fresh clone: `make demo` and `make test`. Both create the venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test venv clean lint

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: $(BIN)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: $(BIN)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
