# The two commands a newcomer needs: `make up` (standalone stack) and `make test` (whole suite).
# Both create the virtualenv from requirements.lock on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lock bench clean openapi

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==0.13.9

$(STAMP): $(BIN)/uv requirements.lock pyproject.toml client/pyproject.toml
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock -e ./client -e '.[dev]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/rillet standalone

test: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench

# Re-pin every dependency (run after changing requirements.in or a pyproject's dependencies);
# it needs only uv, so it works while the old pins conflict with the new constraints.
lock: $(BIN)/uv
	$(BIN)/uv pip compile requirements.in --python $(BIN)/python -o requirements.lock \
		--no-emit-package rillet --no-emit-package rillet-server

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis

# Regenerate the checked-in OpenAPI documents from the handlers.
openapi: $(STAMP)
	$(BIN)/python -m lambdas.openapi
