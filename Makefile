# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install, train patch + wavelet ViTs on Fashion-MNIST, attack them, write the report
#   make test   - create .venv, install, run ruff and pytest
# Override TORCH to install another torch build, e.g. `make test TORCH="torch torchvision"`.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.14.1 torchvision==0.29.1
OUT    ?= results
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# One thread per process: the models are small, and on 2 cores OpenMP's spinning threads cost more than they give.
export OMP_NUM_THREADS ?= 1
export PYTHONUNBUFFERED = 1

.PHONY: demo train attack headline test lint venv clean-results

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## The main job: train patch + wavelet on Fashion-MNIST (~10 min on 2 CPU cores), attack, diagnose, report.
demo: $(STAMP)
	-command -v apt-get >/dev/null && [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$$(id -u)" = 0 ] && \
		(apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || true)
	$(BIN)/python -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist --out $(OUT)
	$(BIN)/python -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --out $(OUT)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
