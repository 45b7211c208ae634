# reel: `make run` starts a node with embedded defaults; `make test` runs the whole suite.
# Both create .venv and install reel (editable, with dev extras) on first use.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= ./.reel
TYPED := events projections actors policies

.PHONY: run test lint typecheck unit bench proto test-llm clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/reel node --data $(DATA) --provider deterministic

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict $(TYPED)

test: $(STAMP) lint typecheck
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python bench/journal.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
