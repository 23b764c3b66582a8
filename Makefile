# The two commands a developer needs: `make demo` and `make test`. Both set themselves up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: all venv lint test unit demo bench clean

all: test

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,sim,k8s]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

lint: venv
	$(BIN)/ruff check operator tests
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest tests/unit tests/property $(PYTEST_ARGS)

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

demo: venv
	$(BIN)/paralleljob demo

bench: venv
	$(BIN)/paralleljob bench placement

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
