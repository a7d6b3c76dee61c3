# b2t-course: every target sets up what it needs (a .venv with the package and its extras, idempotent).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg
# another numeric environment: one thread and another set of PyTorch's CPU kernels than this machine's own, so
# floating-point sums come out in a different order, as on another CPU, thread count or BLAS build. The kernels: on a
# CPU with AVX-512 (where PyTorch picks its AVX-512 kernels) the AVX2 ones, which most laptops and many servers run
# natively (about 13 % faster than the non-SIMD ones in a training run here); elsewhere the non-SIMD ones (default).
# MKL_CBWR=COMPATIBLE (MKL's processor-independent code path) is left out by default: it costs about 40 % more CPU
# time in the training notebooks, which CI's time budget cannot spare. Add it when you can wait:
# make test-portable PORTABLE_ENV="... MKL_CBWR=COMPATIBLE"; or the non-SIMD kernels: PORTABLE_KERNELS=default.
PORTABLE_KERNELS ?= $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo avx2 || echo default)
PORTABLE_ENV ?= OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ATEN_CPU_CAPABILITY=$(PORTABLE_KERNELS)
# make test NUMERICS=portable runs every test and notebook in that environment (make test-portable is short for it).
# The stored notebook outputs are written in this machine's own one (make notebooks), so a portable pass compares
# each output once against another environment's: it fails on an output that does not reproduce and on one that
# depends on the CPU. CI runs its one test pass this way (.ci/run).
NUMERICS ?= native
ifeq ($(filter native portable,$(NUMERICS)),)
$(error NUMERICS=$(NUMERICS) is not known: give native (this machine's kernels and threads) or portable)
endif
TEST_ENV := $(if $(filter portable,$(NUMERICS)),$(PORTABLE_ENV))
# Tests and notebooks run in two pytest-xdist workers, one file (one notebook kernel) per worker at a time: almost
# every test and notebook computes on one thread, so two workers use a two-core machine (CI's) fully. Concurrent
# data preparation is safe (each preparation step holds a file lock). JOBS="-n 0" runs everything in one process.
JOBS ?= -n 2 --dist loadfile --no-loadscope-reorder
# The order the two workers take the files in (--no-loadscope-reorder: pytest-xdist hands them out in this order,
# not by their number of tests): the chapters that train
# longest first, so that the short notebooks and the test files fill the other worker while the last long one ends
# (a long chapter taken last would leave one worker idle for minutes). The portable pass's times on a 2-core Xeon:
# 12 about 780 s, 06 700, 09 670, 07 500, 10 390, 11 290, 08 280; every other notebook under 80 s.
TEST_FIRST := $(foreach n,12 06 09 07 10 11 08,$(filter notebooks/$(n)_%,$(NOTEBOOKS)))
TEST_PATHS := $(TEST_FIRST) $(filter-out $(TEST_FIRST),$(NOTEBOOKS)) tests

.PHONY: setup lint format test test-portable unit-tests course rehearse rehearsal-plan gpu-check lab notebooks clean help

help:
	@echo "make course     run every notebook at the tiny scale (CPU, minutes); notebooks + figures under build/"
	@echo "make course B2T_SCALE=small   (or full) the same notebooks train the paper's experiments on the GPUs, detached,"
	@echo "                in runs/; a second call continues where the first stopped (finished runs are skipped)"
	@echo "make lint       ruff: lint and formatting check of every Python file (make format rewrites them)"
	@echo "make test       all tests (tests/) and strict nbval on every notebook, at the tiny scale"
	@echo "make unit-tests the fast tests only (no training, no data pipeline; under a minute)"
	@echo "make test-portable  the same tests in another numeric environment (1 thread, portable kernels; short for"
	@echo "                make test NUMERICS=portable): a stored output that depends on the CPU fails here first (CI)"
	@echo "make rehearse   rehearse small and full on this CPU: every notebook that reads the scale at B2T_SCALE=full and all but"
	@echo "                10-12 at =small (make rehearsal-plan lists both passes), the documented small/full commands,"
	@echo "                sizes shrunk by one rule, on miniature copies of the real data sources (B2T_REHEARSAL=1); in a"
	@echo "                copy of the working tree under build/rehearsal/"
	@echo "make gpu-check  on a CUDA GPU: bf16 step time, MFU and memory of 6L/18L against nn.Transformer, adaptive vs"
	@echo "                full softmax at V=267,744, 100 small-preset updates (tables and figure in build/gpu_check/)"
	@echo "make lab        JupyterLab on the course"
	@echo "make notebooks  re-execute the notebooks in place at the tiny scale (refresh their stored outputs)"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

setup: $(STAMP)

# ruff's settings (rules, 120 columns, what is excluded) live in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Tests train in a fresh temporary runs folder (B2T_RUNS), removed afterwards: the launcher skips runs that a folder
# already holds, so a test that reused runs/ would not train.
test: $(STAMP)
	@runs=$$(mktemp -d -t b2t_runs.XXXXXX) && trap 'rm -rf "$$runs"' EXIT && \
	echo "B2T_RUNS=$$runs B2T_SCALE=tiny $(TEST_ENV) $(BIN)/python -m pytest $(JOBS) $(NBVAL) $(TEST_PATHS)" && \
	B2T_RUNS=$$runs B2T_SCALE=tiny $(TEST_ENV) $(BIN)/python -m pytest $(JOBS) $(NBVAL) $(TEST_PATHS)

test-portable: $(STAMP)
	@$(MAKE) --no-print-directory test NUMERICS=portable

unit-tests: $(STAMP)
	@runs=$$(mktemp -d -t b2t_runs.XXXXXX) && trap 'rm -rf "$$runs"' EXIT && \
	B2T_RUNS=$$runs B2T_SCALE=tiny $(BIN)/python -m pytest -m "not slow" tests

# tiny unless B2T_SCALE asks for small or full (refused without a CUDA GPU, exit code 2). The training cells call
# b2t_lib.runs.launch: at small/full the runs are detached processes under runs/ (or B2T_RUNS) that outlive
# this command; calling it again re-attaches, skips finished runs and resumes interrupted ones.
# COURSE_OUT: where the executed notebooks, their logs and the figures go (the rehearsal keeps one folder per scale).
# COURSE_JOBS: notebooks executed at a time. The rehearsal runs two (its runs share two CPU stand-ins anyway); on GPUs
# keep one: two launch queues that start at the same moment may both pick the same free GPU.
COURSE_OUT ?= build
COURSE_JOBS ?= 1
course: $(STAMP)
	@mkdir -p $(COURSE_OUT)/notebooks $(COURSE_OUT)/figures $(COURSE_OUT)/logs
	@scale=$$(B2T_SCALE=$(B2T_SCALE) $(BIN)/python -c "import b2t_lib.scale as s; raise SystemExit(s.main())") && \
	echo "course scale: $$scale" && \
	export B2T_SCALE=$$scale B2T_FIGURE_DIR=$(abspath $(COURSE_OUT))/figures TQDM_DISABLE=1 && \
	printf '%s\n' $(NOTEBOOKS) | xargs -P $(COURSE_JOBS) -I{} sh -c 'log=$(COURSE_OUT)/logs/$$(basename {} .ipynb).log; \
	  echo "== {}"; $(BIN)/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=-1 \
	    --output-dir $(COURSE_OUT)/notebooks {} > $$log 2>&1 && exit 0; \
	  echo "FAILED: {} (its log: $$log)"; tail -n 60 $$log; exit 255'
	@echo "executed notebooks: $(COURSE_OUT)/notebooks/   figures: $(COURSE_OUT)/figures/   logs: $(COURSE_OUT)/logs/"
	@ls $(COURSE_OUT)/figures

# The rehearsal: small and full on a CPU (b2t_lib/scale.py, presets.rehearsal_sizes, data/miniature.py). It runs in a
# copy of the working tree (build/rehearsal/repo), so its data/ and runs/ never touch this checkout's; the copy keeps
# them between calls, so a second `make rehearse` re-attaches and trains nothing. The Hugging Face libraries read
# the miniature sources from build/rehearsal/hf, offline. The documented commands run in a fresh copy every time.
REHEARSAL_DIR := $(CURDIR)/build/rehearsal
# the chapters that train most first (two run at a time): 10, 11 and 12 take 2-4 times as long as any other at small
# and full (cell times of the executed notebooks), so they lead and the short ones fill in behind them
REHEARSAL_FIRST := $(filter notebooks/10_% notebooks/11_% notebooks/12_%,$(NOTEBOOKS))
REHEARSAL_ORDER := $(REHEARSAL_FIRST) $(shell printf '%s\n' $(filter-out $(REHEARSAL_FIRST),$(NOTEBOOKS)) | sort -r)
# at both scales, only the chapters that read the scale (get_scale): the others (01-05) compute the same thing at
# every scale, and `make test` runs them (a claim there is an assert at tiny, so nothing is left unchecked)
REHEARSAL_SCALED := $(shell grep -l get_scale $(REHEARSAL_ORDER))
# ... and chapters 10-12 at full only: they train the MT preset alone and their cells tell tiny from the other
# scales, never small from full, so at small they would run the cells they run at full, over chapter 06's path (the
# MT preset at small) with the variants' code that make test runs at tiny; at full their runs go through torchrun
# and DDP, which nothing else rehearses for every variant (tests/test_rehearsal.py checks the premises).
REHEARSAL_FULL_ONLY := $(filter notebooks/10_% notebooks/11_% notebooks/12_%,$(REHEARSAL_SCALED))
REHEARSAL_SMALL := $(filter-out $(REHEARSAL_FULL_ONLY),$(REHEARSAL_SCALED))
REHEARSAL_ENV := B2T_REHEARSAL=1 HF_HOME=$(REHEARSAL_DIR)/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
                 PYTHONPATH=$(REHEARSAL_DIR)/repo B2T_RUNS=$(REHEARSAL_DIR)/repo/runs TQDM_DISABLE=1
rehearse: $(STAMP)
	@mkdir -p $(REHEARSAL_DIR)/repo
	@cd $(REHEARSAL_DIR)/repo && find . -mindepth 1 -maxdepth 1 ! -name data ! -name data-bin ! -name runs ! -name build \
	  ! -name .venv -exec rm -rf {} +
	@git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
	  | tar -xf - -C $(REHEARSAL_DIR)/repo
	@ln -sfn $(CURDIR)/.venv $(REHEARSAL_DIR)/repo/.venv
	$(BIN)/python -m b2t_lib.data.miniature $(REHEARSAL_DIR)/hf
	@# The documented commands (a pytest in a copy of the repository) run beside the two notebook passes: those wait
	@# on the stand-in GPUs between runs, and the commands fill that time. Their log is printed once both are done.
	@docs_log=$(REHEARSAL_DIR)/docs_commands.log; \
	echo "== rehearsal: the documented small/full commands, beside the notebooks (their log: $$docs_log)"; \
	( cd $(REHEARSAL_DIR)/repo && $(REHEARSAL_ENV) $(BIN)/python -m pytest -p no:cacheprovider -q -s \
	  tests/test_documented_commands.py > $$docs_log 2>&1 ) & docs=$$!; \
	status=0; \
	for scale in small full; do \
	  if [ $$scale = small ]; then notebooks="$(REHEARSAL_SMALL)"; else notebooks="$(REHEARSAL_SCALED)"; fi; \
	  echo "== rehearsal: make course B2T_SCALE=$$scale"; \
	  $(REHEARSAL_ENV) $(MAKE) --no-print-directory -C $(REHEARSAL_DIR)/repo -o .venv/.installed course \
	    B2T_SCALE=$$scale COURSE_OUT=build/$$scale COURSE_JOBS=2 NOTEBOOKS="$$notebooks" || { status=1; break; }; \
	done; \
	wait $$docs || status=1; \
	echo "== rehearsal: the documented small/full commands (run beside the notebooks)"; cat $$docs_log; \
	exit $$status
	@echo "== rehearsal: make gpu-check (on this CPU, sizes shrunk)"
	@cd $(REHEARSAL_DIR)/repo && $(REHEARSAL_ENV) $(BIN)/python benchmarks/gpu_check.py --out build/gpu_check
	@echo "rehearsal passed: notebooks and figures in $(REHEARSAL_DIR)/repo/build/{small,full}/"

# The notebooks each rehearsal pass executes, in order (tests/test_rehearsal.py reads them here).
rehearsal-plan:
	@echo "small: $(REHEARSAL_SMALL)"
	@echo "full: $(REHEARSAL_SCALED)"

# The prepared GPU check (benchmarks/gpu_check.py): refused without a CUDA GPU unless rehearsed (make rehearse runs it).
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --out build/gpu_check

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

notebooks: $(STAMP)
	@runs=$$(mktemp -d -t b2t_runs.XXXXXX) && trap 'rm -rf "$$runs"' EXIT && \
	for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  B2T_RUNS=$$runs B2T_SCALE=tiny TQDM_DISABLE=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=-1 $$nb || exit 1; \
	done

clean:
	rm -rf build
