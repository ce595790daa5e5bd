# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install, train patch + wavelet ViTs on Fashion-MNIST, attack them, write the report
#   (make quick - the same in about 80 s on 2 idle cores: briefly trained models, 256 images, a quick look)
#   make test   - create .venv, install (Fashion-MNIST too where it can), run ruff and pytest on every core
#                 (every test: what CI runs; the tests that need the real Fashion-MNIST skip, saying so, without it)
# and, while working on the code:
#   make test-fast - the same set-up, then the tests not marked slow (no processes, no end-to-end runs; ~1 min)
#   make test-bare - make test as on a machine without Fashion-MNIST and network (Linux, as root: see below)
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
# The cores this process may run on (its CPU affinity), never OMP_NUM_THREADS: GNU nproc honours that variable,
# so with the one-thread-per-rank setting above it would say 1 and run one rank.
# Any number works: the attack command caps its ranks at the run's seeding blocks (1,000 images = 8 blocks of 128;
# cifar10's 256 and ablation's 200 = 2) and the ranks beyond them idle, said in the log.
NPROC  ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count())")
RUN    := $(BIN)/torchrun --standalone --nproc_per_node $(NPROC)

.PHONY: demo quick headline ablation tokenpool tokenpool-pareto cifar10 defenses test test-fast test-bare lint venv bench docs \
	fashion-mnist

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## Fashion-MNIST from Debian's dataset-fashion-mnist where this is Debian, run as root, without it yet (the
## package lists refreshed if the first try fails). A failure is tolerated: the commands then download the
## files (robustbench_wave/data/fashion_mnist.py) and the tests use the synthetic stand-in or skip, saying so.
DATASETS_DIR := /usr/share/datasets
FASHION_MNIST_DIR := $(DATASETS_DIR)/fashion-mnist
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -y -q
fashion-mnist:
	-@if [ ! -d $(FASHION_MNIST_DIR) ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		$(APT_GET) install dataset-fashion-mnist >/dev/null 2>&1 || \
		{ $(APT_GET) update >/dev/null 2>&1 && $(APT_GET) install dataset-fashion-mnist >/dev/null 2>&1; } || \
		echo "Fashion-MNIST: apt-get install dataset-fashion-mnist failed (no network?); going on without it"; \
	fi

## The main job: train patch + wavelet on Fashion-MNIST, attack, diagnose, report -- on every local core:
## the two trainings run side by side (one run per rank), the attack splits the 1,000 test images over the ranks.
## DEMO_ARGS: more attack flags, e.g. DEMO_ARGS="--escalation off" (the published demo's: docs/results.md says why).
DEMO_ARGS ?=
demo: $(STAMP) fashion-mnist
	$(RUN) -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist --results-dir $(OUT) --parallel runs
	$(RUN) -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --results-dir $(OUT) $(DEMO_ARGS)

## A first table and report in about 80 s on 2 idle cores (docs/command-line.md): patch and wavelet
## trained briefly (QUICK_EPOCHS on QUICK_TRAIN images, into $(QUICK_OUT), apart from the demo's models) and
## attacked with attacks/quick-look.toml -- the headline's attacks with few steps -- on QUICK_N test images. A QUICK
## LOOK, labelled so in its table and report (suite quick-look), not numbers to report.
QUICK_OUT    ?= $(OUT)/quick
QUICK_EPOCHS ?= 2
QUICK_TRAIN  ?= 8000
QUICK_N      ?= 256
quick: $(STAMP)
	$(RUN) -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist --epochs $(QUICK_EPOCHS) \
		--train-subset $(QUICK_TRAIN) --n-examples 1000 --results-dir $(QUICK_OUT) --parallel runs --no-progress
	$(RUN) -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --suite quick-look \
		--n-examples $(QUICK_N) --n-diagnostics 16 --diagnostics-steps 5 --results-dir $(QUICK_OUT) --no-progress

## The documented multi-seed headline: 3 training seeds x (patch, wavelet) trained side by side (one run per rank), each
## seed attacked with the `headline` suite on every local core (records identical to one process's), one report.
SEEDS    ?= 0 1 2
TRAIN_SEEDS = $(foreach s,$(SEEDS),--train-seed $(s))
HEADLINE_N ?= 500
HEADLINE := $(OUT)/attack/fashion-mnist
headline: $(STAMP)
	$(RUN) -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist $(TRAIN_SEEDS) --results-dir $(OUT) \
		--parallel runs
	for s in $(SEEDS); do \
		$(RUN) -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --suite headline \
			--n-examples $(HEADLINE_N) --train-seed $$s --results-dir $(OUT) || exit 1; \
	done
	$(BIN)/python -m robustbench_wave.report $(foreach s,$(SEEDS),$(HEADLINE)/patch+wavelet_headline_n$(HEADLINE_N)_seed0_train$(s)) \
		--out $(HEADLINE)/headline-report.md

## Token Pooling models next to the unpooled ones (train side by side, one run per rank, then attack all four
## with the headline suite on TOKENPOOL_N test images on every local core; the pooled ones also with BPDA
## through the cluster assignment alone, bpda-assignment, for claim 5).
TOKENPOOL_N ?= 500
tokenpool: $(STAMP)
	$(RUN) -m robustbench_wave.train --model patch --model wavelet --model patch-tokenpool --model wavelet-tokenpool \
		--results-dir $(OUT) --parallel runs
	$(RUN) -m robustbench_wave.attack --model patch --model wavelet --model patch-tokenpool --model wavelet-tokenpool \
		--suite headline --n-examples $(TOKENPOOL_N) --grad-modes patch-tokenpool=exact,blocked,bpda,bpda-assignment \
		--grad-modes wavelet-tokenpool=exact,blocked,bpda,bpda-assignment --results-dir $(OUT)

## CIFAR-10 (colour: the wavelet tokenizer's YCbCr / 4:2:0 path): train the four models side by side (one run
## per rank), then attack them with AutoAttack's standard suite (L-inf 2/255, 4/255, 8/255; L2 0.25, 0.5) under
## every gradient mode. The real CIFAR-10 images as JPEGs when ../shared/data holds them, else the download.
CIFAR10        ?= $(if $(wildcard ../shared/data/cifar10-jpeg.zip),imagefolder:../shared/data/cifar10-jpeg.zip,cifar10)
CIFAR10_MODELS ?= patch wavelet wavelet-coif1 wavelet-dense
CIFAR10_EPOCHS ?= 10
CIFAR10_N      ?= 256
CIFAR10_SUITE  ?= autoattack
CIFAR10_SEEDS  ?= 0
cifar10: $(STAMP)
	$(RUN) -m robustbench_wave.train $(foreach m,$(CIFAR10_MODELS),--model $(m)) --dataset $(CIFAR10) \
		--epochs $(CIFAR10_EPOCHS) $(foreach s,$(CIFAR10_SEEDS),--train-seed $(s)) --results-dir $(OUT) --parallel runs
	for s in $(CIFAR10_SEEDS); do \
		$(RUN) -m robustbench_wave.attack $(foreach m,$(CIFAR10_MODELS),--model $(m)) --dataset $(CIFAR10) \
			--suite $(CIFAR10_SUITE) --n-examples $(CIFAR10_N) --train-seed $$s --results-dir $(OUT) || exit 1; \
	done

## Claim 3's attribution over SEEDS: the ablation chain patch -> patch-raw -> wavelet-denseproj -> wavelet-dense
## -> wavelet (and wavelet-coif1) trained side by side on Fashion-MNIST (one run per rank), then each training
## seed attacked with the headline suite on ABLATION_N test images; `make claims` attributes the gap step by
## step with the seeds pooled. Finished trainings and attack chunks are reused, so a killed run resumes.
ABLATION_MODELS ?= patch wavelet wavelet-dense patch-raw wavelet-denseproj wavelet-coif1
ABLATION_N      ?= 200
ablation: $(STAMP)
	$(RUN) -m robustbench_wave.train $(foreach m,$(ABLATION_MODELS),--model $(m)) --dataset fashion-mnist \
		$(TRAIN_SEEDS) --results-dir $(OUT) --parallel runs
	for s in $(SEEDS); do \
		$(RUN) -m robustbench_wave.attack $(foreach m,$(ABLATION_MODELS),--model $(m)) --dataset fashion-mnist \
			--suite headline --n-examples $(ABLATION_N) --train-seed $$s --results-dir $(OUT) || exit 1; \
	done

## Claim 4 (Token Pooling's accuracy-compute trade-off): every pooling method at three keep schedules
## (models/tokenpool-pareto/), each fine-tuned for POOL_EPOCHS at POOL_LR from the trained `patch` model of the
## same seed, as the paper does; the whole grid for POOL_SEEDS, the middle budget also for POOL_MID_SEEDS.
## `make claims` then draws the Pareto figure from these training runs alone.
POOL_EPOCHS  ?= 1
POOL_LR      ?= 0.0005
POOL_SEEDS   ?= 0
POOL_MID_SEEDS ?= 1 2
POOL_ARGS    ?=
POOL_GRID    := $(sort $(wildcard models/tokenpool-pareto/*.toml))
POOL_TUNE    := $(RUN) -m robustbench_wave.train --dataset fashion-mnist --epochs $(POOL_EPOCHS) --lr $(POOL_LR) \
	--results-dir $(OUT) --parallel runs $(POOL_ARGS)
tokenpool-pareto: $(STAMP)
	$(RUN) -m robustbench_wave.train --model patch --dataset fashion-mnist $(foreach s,$(POOL_SEEDS) $(POOL_MID_SEEDS),--train-seed $(s)) \
		--results-dir $(OUT) --parallel runs
	$(POOL_TUNE) $(foreach s,$(POOL_GRID),--model $(s)) $(foreach s,$(POOL_SEEDS),--train-seed $(s))
	$(POOL_TUNE) $(foreach s,$(filter %-48-32-16-16.toml,$(POOL_GRID)),--model $(s)) $(foreach s,$(POOL_MID_SEEDS),--train-seed $(s))

## The gallery of defences known to be broken (Athalye, Carlini & Wagner 2018; robustbench_wave/models/gallery.py):
## train the small Fashion-MNIST CNN, its thermometer-code twin and the CNN behind random resize-and-pad (2 epochs,
## ~3 min of CPU each), attack every defence with DEFENSES_SUITE on DEFENSES_N test images twice -- naive
## (exact/blocked gradients, --eot off) and adaptive (the attack command's automatic BPDA / EOT) -- and write one
## table, $(OUT)/gallery/gallery.{txt,csv,tex}. Finished weights are reused and killed attack runs resume from
## their chunks; each run's output is in $(OUT)/gallery/logs/. More flags: DEFENSES_ARGS (see --help).
DEFENSES_N     ?= 200
DEFENSES_SUITE ?= headline
DEFENSES_ARGS  ?=
defenses: $(STAMP)
	$(BIN)/python -m robustbench_wave.gallery all --results-dir $(OUT)/gallery --n-examples $(DEFENSES_N) \
		--suite $(DEFENSES_SUITE) $(DEFENSES_ARGS)

## Benchmarks (benchmarks/README.md): ratios measured side by side in one run, ~10 min on 2 cores; writes
## benchmarks/results/latest.csv and latest.md; then the suite against a strong independent attack on undefended models
## (bench_strength.py: benchmarks/results/strength.csv, ~5 min). `make bench BENCH_ARGS=--quick` for a smoke run of the first.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_strength

## The README's and docs/'s tables re-rendered from results/published/ (after `python -m tools.docs publish RUN --name NAME`),
## and every number they quote checked against the file and cell its section's cite lines name (tests/test_docs.py too).
docs: $(STAMP)
	$(BIN)/python -m tools.docs render

## pytest on one worker per core (pytest-xdist, a test to whichever worker is free), the 15 slowest tests listed.
## A run that collects no test fails (pytest's exit 5), as any failure does.
PYTEST := $(BIN)/python -m pytest -q -n $(NPROC) --dist worksteal --durations=15
test: $(STAMP) fashion-mnist
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST)

## Every test but those marked slow (pyproject.toml: they start processes or run for seconds; make test runs them).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

## make test's pytest as a machine without Fashion-MNIST and without network runs it: in private mount and
## network namespaces (Linux, root), Debian's data sets hidden under an empty tmpfs, an empty data folder, only
## the loopback interface (torchrun's rendezvous). The tests that need the real data set skip, saying so.
test-bare: $(STAMP)
	unshare --mount --net sh -c '\
		if [ -d $(DATASETS_DIR) ]; then mount -t tmpfs tmpfs $(DATASETS_DIR) || exit 1; fi; \
		ip link set lo up || exit 1; \
		empty=$$(mktemp -d) && RBW_DATA_DIR=$$empty $(PYTEST); status=$$?; rm -rf $$empty; exit $$status'

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## The claims report (results/claims.md, benchmarks/README.md#cost-model): the cost-model benchmark (~1 min), the
## side-by-side training-speed benchmark (~2 min),
## then every claim of the source papers from whatever $(OUT) holds (attack runs, training folders); nothing
## is trained or attacked again, a claim without its results says which command measures it.
CLAIMS_RUNS  = $(patsubst %/records.csv.gz,%,$(wildcard $(OUT)/attack/*/*/records.csv.gz))
CLAIMS_TRAIN = $(wildcard $(OUT)/train/*)
.PHONY: claims
claims: $(STAMP)
	$(BIN)/python -m benchmarks.bench_cost_model
	$(BIN)/python -m benchmarks.bench_tokenizer_speed
	$(BIN)/python -m robustbench_wave.report claims $(foreach r,$(CLAIMS_RUNS),--run $(r)) \
		$(foreach d,$(CLAIMS_TRAIN),--train $(d)) --cost-model benchmarks/results/cost_model_grid.csv \
		$(if $(CLAIMS_TRAIN),--throughput benchmarks/results/tokenizer_speed_pairs.csv) --out $(OUT)/claims.md
