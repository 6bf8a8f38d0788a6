# Weft developer entry points. `make run` and `make test` are the whole set-up.
SHELL := /bin/bash
PY_VERSION ?= python3.11
PYTHON_BOOT := $(shell command -v $(PY_VERSION) || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
DATA := .weft
# checkov pins dependencies that conflict with ours, so it lives in its own venv.
CHECKOV := .tools/checkov/bin/checkov

.PHONY: help run func test lint types unit check-infra checkov package bench clean deps

help:
	@echo "make run    - start Azurite and the function app on devhost (http://127.0.0.1:7071)"
	@echo "make test   - install everything, then lint, type-check and run the whole test suite"
	@echo "make func   - run the app with Azure Functions Core Tools (func start), if you have it"
	@echo "make bench  - run the benchmarks in bench/"

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

node_modules/.installed: package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

deps: $(VENV)/.installed node_modules/.installed

$(CHECKOV): infra/requirements-checkov.txt
	$(PYTHON_BOOT) -m venv .tools/checkov
	.tools/checkov/bin/python -m pip install -q -r infra/requirements-checkov.txt
	touch $@

checkov: $(CHECKOV)

# The Function App package for Azure (docs/deploy.md): .build/weft.zip
package:
	bash infra/package.sh

# Static checks of the Azure deployment (Terraform, host.json, app settings, monitoring queries).
check-infra: deps checkov
	$(PY) -m pytest tests/infra -q

local.settings.json:
	cp local.settings.json.example local.settings.json

run: deps local.settings.json
	$(PY) -m devhost --with-azurite

func: deps local.settings.json
	@command -v func >/dev/null || { echo "Azure Functions Core Tools (func) is not installed; use 'make run'."; exit 1; }
	. $(VENV)/bin/activate && func start

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: $(VENV)/.installed
	$(VENV)/bin/mypy shared orchestrators activities entities triggers devhost function_app.py

test: deps checkov lint types
	$(PY) -m pytest

bench: deps
	for b in bench/*.py; do echo "== $$b"; PYTHONPATH=. $(PY) $$b || exit 1; done

clean:
	rm -rf $(DATA) .mypy_cache .ruff_cache .pytest_cache .hypothesis
