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

.PHONY: setup test demo clean-demo
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q --no-deps mambapy==1.2.0  # --model mamba; --no-deps keeps the torch above
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

# .venv/bin on PATH: the DVC pipeline test runs stages that call `posrnn` and `dvc`.
test: setup
	PATH="$(abspath $(BIN)):$$PATH" DVC_NO_ANALYTICS=1 $(BIN)/python -m pytest

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
