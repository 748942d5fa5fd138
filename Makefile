# Two commands from a clean checkout: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,dev,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy src

bench: $(STAMP)
	$(BIN)/python bench/journal.py

clean:
	rm -rf $(VENV)
