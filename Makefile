# nemolaunch: set-up, tests and the embedded CPU default.
#   make bench   set up, serve the tiny model on the vLLM CPU engine, run the sweep
#   make test    set up, lint, type-check, run the test suite (with the real engine)

PYTHON     ?= python3
VENV       ?= .venv
BIN        := $(VENV)/bin
ENGINE_LOCK := lockfiles/cpu.txt
# The engine venv lives outside the checkout, keyed by the lock's hash: clones on one machine share it,
# and a changed lock gets a fresh one.
ENGINE_DIR ?= $(HOME)/.cache/nemolaunch/engine-$(shell sha256sum $(ENGINE_LOCK) | cut -c1-12)
ENGINE_PY  := $(ENGINE_DIR)/bin/python
MODEL_DIR  ?= build/tiny-llama
PROFILE    ?= cpu
MODEL      ?= $(MODEL_DIR)

export NEMOLAUNCH_TEST_ENGINE := $(ENGINE_PY)
export NEMOLAUNCH_TEST_MODEL := $(MODEL_DIR)

.PHONY: venv engine model test lint docs type pytest bench lock clean

venv: $(BIN)/nemolaunch
$(BIN)/nemolaunch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev,ray]'
	-git config core.hooksPath .githooks  # the commit-msg hook: subjects of at most 72 characters
	touch $@

# The vLLM CPU engine, installed from the hashed lock (no resolver at install time). The folder is named by
# the lock's hash, so only its existence matters (order-only), not the lock's timestamp.
engine: $(ENGINE_DIR)/.complete
$(ENGINE_DIR)/.complete: | $(ENGINE_LOCK)
	rm -rf $(ENGINE_DIR)
	$(PYTHON) -m venv $(ENGINE_DIR)
	$(ENGINE_DIR)/bin/pip install -q --require-hashes --no-deps -r $(ENGINE_LOCK)
	$(ENGINE_PY) -I -c 'import vllm, torch, transformers; print("engine: vllm", vllm.__version__, "torch", torch.__version__)'
	touch $@

model: $(MODEL_DIR)/config.json
$(MODEL_DIR)/config.json: | venv engine
	$(BIN)/nemolaunch model tiny $(MODEL_DIR) --python $(ENGINE_PY)

# lint: style, the import contracts (pyproject's [tool.importlinter]: the layers, checks/ and child/ apart) and
# docs/reference/cli.md against the commands (make docs rewrites it)
lint: venv
	$(BIN)/ruff check launcher checks tests benchmarks
	$(BIN)/ruff format --check launcher checks tests benchmarks
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m launcher.cli.reference --check

docs: venv
	$(BIN)/python -m launcher.cli.reference

type: venv
	$(BIN)/mypy

# the fast part on three workers, then the tests that start the real engine, in one process (tests/conftest.py);
# both run, and the first failure's status is make's
pytest: venv engine model
	$(BIN)/pytest -q -m "not engine"; fast=$$?; $(BIN)/pytest -q -m engine && exit $$fast

test: lint type pytest

# The main job: serve MODEL with PROFILE, sweep concurrency, write the results and report, stop the server.
# On a GPU host: make bench PROFILE=sm120 MODEL=/models/x ENGINE=/path/to/vllm-venv/bin/python
# The workload is nemolaunch's own default (launcher/defaults.py) unless CONCURRENCY, INPUT_LEN or OUTPUT_LEN is
# given; the tiny CPU model gets a CPU-sized one (its levels last about a second each on 2 cores).
BENCH_OUT   ?= build/bench/$(PROFILE)-$(shell date +%Y%m%d-%H%M%S)
ifeq ($(PROFILE),cpu)
BENCH_DEPS  := venv engine model
ENGINE      ?= $(ENGINE_PY)
CONCURRENCY ?= 1,2,4,8
INPUT_LEN   ?= 128
OUTPUT_LEN  ?= 64
else
BENCH_DEPS  := venv
endif

bench: $(BENCH_DEPS)
	$(BIN)/nemolaunch bench --profile $(PROFILE) --model $(MODEL) $(if $(ENGINE),--python $(ENGINE)) \
	  $(if $(CONCURRENCY),--concurrency $(CONCURRENCY)) $(if $(INPUT_LEN),--input-len $(INPUT_LEN)) \
	  $(if $(OUTPUT_LEN),--output-len $(OUTPUT_LEN)) --out $(BENCH_OUT)

# Regenerate the generated locks from their inputs with a real resolver (uv), hashes included. torch's CPU
# wheel comes from pip's configured find-links when there is one.
# (lockfiles/seed-2026-03.* is a historical record, not generated.)
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec
lock: venv
	links=$$($(BIN)/pip config get global.find-links 2>/dev/null); \
	$(BIN)/uv pip compile -q $(LOCK_FLAGS) $${links:+--find-links $$links} --custom-compile-command "make lock" \
	  -o lockfiles/cpu.txt lockfiles/cpu.in
	$(BIN)/uv pip compile -q --generate-hashes --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
	  --custom-compile-command "make lock" -o lockfiles/cuda-vllm033.txt lockfiles/cuda-vllm033.in

clean:
	rm -rf build $(VENV) .mypy_cache .ruff_cache .pytest_cache
