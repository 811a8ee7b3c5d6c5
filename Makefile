# The two commands a newcomer needs: `make run` and `make test`.  Both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := requirements-dev.txt $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)

.PHONY: install run test test-fast proto bench clean

$(STAMP): $(SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)  ## start a local Magnetar (PostgreSQL + brokers + coordinator + admin)
	$(BIN)/magnetar-local run

test: $(STAMP)  ## the whole suite: unit, integration (real PostgreSQL), end to end (real processes)
	$(BIN)/pytest -q -ra

test-fast: $(STAMP)  ## unit and integration tests only
	$(BIN)/pytest -q -ra -m "not e2e"

proto: $(STAMP)  ## regenerate the committed protobuf code
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=libs/protocol/src/magnetar_protocol \
		--pyi_out=libs/protocol/src/magnetar_protocol proto/magnetar.proto

bench: $(STAMP)  ## every benchmark, figures printed (see docs/performance.md)
	@for b in bench/ceiling.py bench/produce.py bench/consume.py bench/txn.py; do \
		test -f $$b && $(BIN)/python $$b || true; done

clean:
	rm -rf $(VENV) .magnetar .pytest_cache
