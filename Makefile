# Two commands from a clean checkout: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench soak clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples scripts soak
	$(BIN)/mypy src soak

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[all,dev,bench]'  # one resolve: the bench's peers must not move the adapters' pins
	$(BIN)/python bench/run.py
	$(BIN)/python bench/workers.py

# The random-kill soak (docs/reliability.md): at least N SIGKILLs per store; exits non-zero on a violation.
N ?= 100
STORES ?= sqlite,jsonl,postgresql
soak: $(STAMP)
	$(BIN)/python -m soak --kills $(N) --stores $(STORES)

clean:
	rm -rf $(VENV)
