# posrnn — set-up, tests and the demo. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel of torch (a bare `torch` in a fresh venv pulls a multi-GB CUDA build).
# On a GPU machine: make setup TORCH=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
DEMO   ?= runs/demo
DEMO_ARGS ?= --task reverse --model gru --vocab-size 16 --length 8 --hidden-size 64 \
             --iterations 4000 --batch-size 128 --warmup 40 --seed 0 --threads 1

.PHONY: setup test test-all test-slow demo clean-demo gpu-wheels
EXAMPLE_CORE := examples/posrnn-example-core
setup: $(VENV)/.installed $(VENV)/.example-core

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q --no-deps mambapy==1.2.0  # --model mamba; --no-deps keeps the torch above
	$(BIN)/python -m pip install -q --no-deps xlstm==2.0.6  # --model xlstm; --no-deps: not mlstm_kernels (pyproject.toml)
	# tests/test_blocks_reference.py: Hawk's full block against recurrentgemma's own PyTorch ResidualBlock (about
	# 230 kB); --no-deps: not its JAX code nor its numpy pin, and its torch modules need only einops and jaxtyping
	$(BIN)/python -m pip install -q --no-deps recurrentgemma==1.0.1 einops==0.8.2 jaxtyping==0.3.11 wadler_lindig==0.1.8
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

# The example plugin core (docs/plugins.md): a package outside posrnn_cli, found through its entry
# point; the tests train it, so a change to the plugin interface that breaks it fails CI.
$(VENV)/.example-core: $(EXAMPLE_CORE)/pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install -q --no-deps -e $(EXAMPLE_CORE)
	touch $@

# .venv/bin on PATH: the DVC pipeline test runs stages that call `posrnn` and `dvc`.
# `make test` (CI) runs every test but those marked slow (a minute or more each on 2 cores: kill -9
# and signals at random moments, the DVC pipeline end to end, SLURM preemption, the bare-venv GPU
# check); `make test-all` runs them too.
PYTEST = PATH="$(abspath $(BIN)):$$PATH" DVC_NO_ANALYTICS=1 $(BIN)/python -m pytest
# Both cores: two pytest-xdist workers, each taking whole test files (--dist loadfile), so a
# module's fixtures and the files its tests share stay in one process; the 25 slowest tests are
# listed at the end, where a growing suite shows first.
XDIST = -n 2 --dist loadfile --durations=25
# ruff first (pyproject.toml's [tool.ruff]: unused imports, 120 columns, no private-name imports
# in the tests), a second or so, so a lint error stops the run before the tests start.
LINT = $(BIN)/ruff check posrnn_cli tests examples
test: setup
	$(LINT)
	$(PYTEST) -m "not slow" $(XDIST)

test-all: setup
	$(LINT)
	$(PYTEST) $(XDIST)

test-slow: setup
	$(PYTEST) -m slow

# The two runs side by side, one core each: the vanilla one in the background (its output in
# $(DEMO)/vanilla.log), the PE one with its progress bar; then the comparison.
demo: setup
	mkdir -p $(DEMO)
	$(BIN)/posrnn train $(DEMO_ARGS) --pe none --out $(DEMO)/vanilla --force --json > $(DEMO)/vanilla.log 2>&1 & \
	  vanilla=$$!; \
	  $(BIN)/posrnn train $(DEMO_ARGS) --pe sinusoidal --out $(DEMO)/pe --force; pe=$$?; \
	  wait $$vanilla; v=$$?; \
	  [ $$v = 0 ] || cat $(DEMO)/vanilla.log; [ $$pe = 0 ] && [ $$v = 0 ]
	$(BIN)/posrnn compare $(DEMO)/vanilla $(DEMO)/pe

clean-demo:
	rm -rf $(DEMO)

# The wheels a bare GPU machine (no network; Python 3.12, torch, typer, rich, pyyaml, numpy,
# matplotlib, sentencepiece, pytest) lacks for what posrnn imports there: rapidfuzz (imported
# by the scores at import time), ruamel.yaml (params files are read as DVC reads them, YAML 1.2)
# mambapy (--model mamba) and xlstm (--model xlstm). dvc, datasets and submitit are
# imported only by the commands that use them, so they stay out. tools/gpu_check.sh installs
# the folder with --no-index --no-deps. GPU_PYTHON_VERSION picks another CPython (the tests
# use the one running them); the folder is replaced only once complete and under 64 MiB.
GPU_WHEELS ?= rapidfuzz==3.14.6 mambapy==1.2.0 xlstm==2.0.6 ruamel.yaml==0.19.1
GPU_PYTHON_VERSION ?= 3.12
WHL ?= .whl
gpu-wheels:
	rm -rf $(WHL).new && mkdir -p $(WHL).new
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON_VERSION) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d $(WHL).new $(GPU_WHEELS)
	@size=$$(du -sb $(WHL).new | cut -f1); \
	  if [ $$size -ge 67108864 ]; then echo "error: $(WHL).new holds $$size bytes, over 64 MiB; trim GPU_WHEELS" >&2; exit 1; fi; \
	  rm -rf $(WHL) && mv $(WHL).new $(WHL) && \
	  echo "$(WHL): $$(ls $(WHL) | wc -l) wheel(s) for CPython $(GPU_PYTHON_VERSION), $$(du -sh $(WHL) | cut -f1) (limit 64 MiB)"
