# Two commands: `make run` (the local stack) and `make test` (every check CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test check lint typecheck imports pytest install system-deps node-deps frontend frontend-test lock clean

run: $(STAMP) frontend
	exec $(BIN)/nexus up

test: system-deps $(STAMP) check

check: lint typecheck imports frontend-test pytest

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
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

# jsforce for the sfcrm client suite (tests/e2e/jsforce), from the npm registry, as locked
node-deps:
	cd tests/e2e/jsforce && npm ci --no-audit --no-fund --loglevel=error

# The browser CRM (frontend/): npm ci as locked (again only when the lock file changes), then
# a Vite build into frontend/dist/, which the gateway serves at `/`.
FRONTEND_DEPS := frontend/node_modules/.installed
$(FRONTEND_DEPS): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error
	touch $@

frontend: $(FRONTEND_DEPS)
	cd frontend && npm run --silent build

frontend-test: $(FRONTEND_DEPS)
	cd frontend && npm test --silent

pytest: $(STAMP) node-deps frontend
	$(BIN)/pytest

lock: $(STAMP)
	{ echo "# Pinned versions CI and 'make' install (pip install -c constraints.txt). Regenerate with 'make lock'."; \
	  $(BIN)/pip freeze --exclude-editable | grep -v -i '^nexus' | sort -f; } > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
