# Two commands from a clean checkout: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench soak clean

LOG := $(VENV)/install.log
# A step whose output goes to $(LOG): nothing on success; on failure the log is printed (pip's errors) and make stops.
logged = $(1) >>$(LOG) 2>&1 || { cat $(LOG) >&2; echo "make: $(2) failed (the log is $(LOG))" >&2; exit 1; }
PIP := $(BIN)/pip install -q --disable-pip-version-check
EXTRAS := all,dev

# One line per step instead of pip's output.
$(STAMP): pyproject.toml
	@echo "==> creating $(VENV) with $(PY)"
	@$(PY) -m venv $(VENV)
	@: > $(LOG)
	@echo "==> upgrading pip"
	@$(call logged,$(PIP) --upgrade pip,upgrading pip)
	@echo "==> installing tether with every extra into $(VENV) (a minute or two on a fresh clone)"
	@$(call logged,$(PIP) -e '.[$(EXTRAS)]',installing tether)
	@touch $(STAMP)
	@echo "==> installed"

demo: $(STAMP)
	@$(BIN)/tether demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples scripts soak
	$(BIN)/mypy src soak

bench: $(STAMP)
	@echo "==> installing the bench extra"
	@# one resolve: the bench's peers must not move the adapters' pins
	@$(call logged,$(PIP) -e '.[$(EXTRAS),bench]',installing the bench extra)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/workers.py

# The random-kill soak (docs/reliability.md): at least N SIGKILLs per store; exits non-zero on a violation.
N ?= 100
STORES ?= sqlite,jsonl,postgresql
soak: $(STAMP)
	$(BIN)/python -m soak --kills $(N) --stores $(STORES)

clean:
	rm -rf $(VENV)
