# warm: set-up, demo, tests, lint, benchmarks. Everything installs into ./.venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SOURCES := $(wildcard warmcli tests examples bench tools)

.PHONY: install demo test lint bench stress clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# compat: the checkout is a plain path in a .pth file, as a regular install's package
	# folder is; the default editable mode imports a finder (pathlib, re, urllib...) at
	# every interpreter start, which a user's install never pays and the bench would count.
	$(BIN)/pip install --quiet -e '.[dev,nvcc]' --config-settings editable_mode=compat \
		|| $(BIN)/pip install --quiet -e '.[dev,nvcc]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/warm run examples/matmul_host.py --bundle .warm-demo/host.warm
	$(BIN)/warm stats .warm-demo/host.warm

test: install
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/lint-imports  # the architecture contracts in pyproject.toml
	$(BIN)/python -m pytest -q -n 3  # pytest-xdist: three workers (on 2 cores a third fills the time the others wait on processes: 624 s with two, 542 s with three, stop 47; a fourth gains nothing: 659 s against 665 s, stop 50)

lint: install
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/lint-imports

bench: install
	# warm's modules compiled to bytecode first, as an installed package's are (numpy's are):
	# with PYTHONDONTWRITEBYTECODE set, every process would otherwise compile them again.
	$(BIN)/python -m compileall -q warmcli
	$(BIN)/python -m bench

stress: install
	$(BIN)/python -m pytest -q -s -m slow --run-slow tests  # -s: the trials print their figures

clean:
	rm -rf $(VENV) .warm-demo .pytest_cache .ruff_cache *.egg-info
