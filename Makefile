# Two commands: `make run` (the local stack) and `make test` (every check CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed


.PHONY: run test test-galera check lint typecheck imports pytest install system-deps node-deps frontend frontend-lint frontend-test lock wheel image-test clean

run: $(STAMP) frontend
	exec $(BIN)/nexus up

test: system-deps $(STAMP) check

check: lint typecheck imports frontend-lint frontend-test pytest

install: $(STAMP)

# Every dependency comes from the hashed lock (requirements/dev.txt, a superset of
# requirements/runtime.txt that the wheel and the image install); Nexus itself goes on top,
# editable, with no further resolution.
$(STAMP): pyproject.toml requirements/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

system-deps:
	./scripts/install-system-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy nexus

imports: $(STAMP)
	$(BIN)/lint-imports

# jsforce for the sfcrm client suite (tests/e2e/jsforce), from the npm registry, as locked;
# the Salesforce CLI `sf` 2.x for tests/e2e/test_sf_cli.py (tests/e2e/sfcli; npm ci only when
# its lock file changes: ~300 MB, ~30 s)
SFCLI_DEPS := tests/e2e/sfcli/node_modules/.installed
$(SFCLI_DEPS): tests/e2e/sfcli/package-lock.json
	cd tests/e2e/sfcli && npm ci --no-audit --no-fund --loglevel=error
	touch $@

node-deps: $(SFCLI_DEPS)
	cd tests/e2e/jsforce && npm ci --no-audit --no-fund --loglevel=error

# The browser CRM (frontend/): npm ci as locked (again only when the lock file changes), then
# a Vite build into frontend/dist/, which the gateway serves at `/`.
FRONTEND_DEPS := frontend/node_modules/.installed
$(FRONTEND_DEPS): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error
	touch $@

frontend: $(FRONTEND_DEPS)
	cd frontend && npm run --silent build

frontend-lint: $(FRONTEND_DEPS)
	cd frontend && npm run --silent lint

frontend-test: $(FRONTEND_DEPS)
	cd frontend && npm test --silent

pytest: $(STAMP) node-deps frontend
	$(BIN)/pytest

# The work engine and the pipeline on a 3-node MariaDB Galera cluster (multi-primary, on
# loopback ports; needs galera-4 and rsync, installed here when missing). Run once per change
# to the work engine; not part of `make test`.
test-galera: $(STAMP)
	./scripts/install-system-deps.sh --galera
	NEXUS_TEST_GALERA=1 $(BIN)/pytest tests/galera

# Regenerate both hashed locks from pyproject.toml (needs the index; review the diff).
LOCK_FLAGS := --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links
lock: $(STAMP)
	$(BIN)/pip-compile --quiet $(LOCK_FLAGS) -o requirements/runtime.txt pyproject.toml
	$(BIN)/pip-compile --quiet $(LOCK_FLAGS) --extra dev -o requirements/dev.txt pyproject.toml

# The wheel users install: grammars, migrations and the built browser bundle inside.
wheel: $(STAMP) frontend
	rm -rf dist build
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .

# Build the base images and the Nexus image, bring deploy/compose.yaml up under podman and
# drive a CRM through it (root, Debian; see scripts/image-test.sh).
image-test:
	bash scripts/image-test.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
