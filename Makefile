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
# Ranks for the demo: one per local core (each with OMP_NUM_THREADS threads), so the machine is not oversubscribed.
NPROC  ?= $(shell nproc 2>/dev/null || $(PYTHON) -c "import os; print(os.cpu_count())")
RUN    := $(BIN)/torchrun --standalone --nproc_per_node $(NPROC)

.PHONY: demo headline tokenpool test lint venv bench

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## The main job: train patch + wavelet on Fashion-MNIST, attack, diagnose, report -- on every local core:
## the two trainings run side by side (one run per rank), the attack splits the 1,000 test images over the ranks.
demo: $(STAMP)
	-command -v apt-get >/dev/null && [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$$(id -u)" = 0 ] && \
		(apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || true)
	$(RUN) -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist --out $(OUT) --parallel runs
	$(RUN) -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --out $(OUT)

## The documented multi-seed headline: 3 training seeds x (patch, wavelet), the `headline` suite, one report.
SEEDS    ?= 0 1 2
HEADLINE_N ?= 500
HEADLINE := $(OUT)/attack/fashion-mnist
headline: $(STAMP)
	$(BIN)/python -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist --seed $(SEEDS) --out $(OUT)
	for s in $(SEEDS); do \
		$(BIN)/python -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --suite headline \
			--n-examples $(HEADLINE_N) --train-seed $$s --out $(OUT) || exit 1; \
	done
	$(BIN)/python -m robustbench_wave.report $(foreach s,$(SEEDS),$(HEADLINE)/patch+wavelet_headline_n$(HEADLINE_N)_seed0_train$(s)) \
		--out $(HEADLINE)/headline-report.md

## Token Pooling models next to the unpooled ones (train, then attack all four with the headline suite).
tokenpool: $(STAMP)
	$(BIN)/python -m robustbench_wave.train --model patch --model wavelet --model patch-tokenpool --model wavelet-tokenpool --out $(OUT)
	$(BIN)/python -m robustbench_wave.attack --model patch --model wavelet --model patch-tokenpool --model wavelet-tokenpool \
		--suite headline --n-examples 500 --out $(OUT)

## Benchmarks (benchmarks/README.md): ratios measured side by side in one run, ~10 min on 2 cores; writes
## benchmarks/results/latest.csv and latest.md. `make bench BENCH_ARGS=--quick` for a smoke run.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all $(BENCH_ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
