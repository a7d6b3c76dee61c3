# b2t-course: every target sets up what it needs (a .venv with the package and its extras, idempotent).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg
# another numeric environment: one thread and PyTorch's portable (non-SIMD) kernels, so floating-point sums come out
# in a different order, as on another CPU, thread count or BLAS build. MKL_CBWR=COMPATIBLE (MKL's processor-independent
# code path) is left out by default: it costs about 40 % more CPU time in the training notebooks, which CI's time
# budget cannot spare. Add it when you can wait: make test-portable PORTABLE_ENV="... MKL_CBWR=COMPATIBLE".
PORTABLE_ENV ?= OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default
# Tests and notebooks run in two pytest-xdist workers, one file (one notebook kernel) per worker at a time: almost
# every test and notebook computes on one thread, so two workers use a two-core machine (CI's) fully. Concurrent
# data preparation is safe (each preparation step holds a file lock). JOBS="-n 0" runs everything in one process.
JOBS ?= -n 2 --dist loadfile

.PHONY: setup test test-portable unit-tests course lab notebooks clean help

help:
	@echo "make course     run every notebook at the tiny scale (CPU, minutes); notebooks + figures under build/"
	@echo "make course B2T_SCALE=small   (or full) the same notebooks train the paper's experiments on the GPUs, detached,"
	@echo "                in runs/; a second call continues where the first stopped (finished runs are skipped)"
	@echo "make test       all tests (tests/) and strict nbval on every notebook, at the tiny scale"
	@echo "make unit-tests the fast tests only (no training, no data pipeline; under a minute)"
	@echo "make test-portable  strict nbval on every notebook again, in another numeric environment (1 thread,"
	@echo "                portable kernels): a stored output that depends on the CPU fails here first"
	@echo "make lab        JupyterLab on the course"
	@echo "make notebooks  re-execute the notebooks in place at the tiny scale (refresh their stored outputs)"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

setup: $(STAMP)

# Tests train in a fresh temporary runs folder (B2T_RUNS), removed afterwards: the launcher skips runs that a folder
# already holds, so a test that reused runs/ would not train.
test: $(STAMP)
	@runs=$$(mktemp -d -t b2t_runs.XXXXXX) && trap 'rm -rf "$$runs"' EXIT && \
	echo "B2T_RUNS=$$runs B2T_SCALE=tiny $(BIN)/python -m pytest $(JOBS) $(NBVAL) tests notebooks" && \
	B2T_RUNS=$$runs B2T_SCALE=tiny $(BIN)/python -m pytest $(JOBS) $(NBVAL) tests notebooks

test-portable: $(STAMP)
	@runs=$$(mktemp -d -t b2t_runs.XXXXXX) && trap 'rm -rf "$$runs"' EXIT && \
	echo "B2T_RUNS=$$runs B2T_SCALE=tiny $(PORTABLE_ENV) $(BIN)/python -m pytest $(JOBS) $(NBVAL) notebooks" && \
	B2T_RUNS=$$runs B2T_SCALE=tiny $(PORTABLE_ENV) $(BIN)/python -m pytest $(JOBS) $(NBVAL) notebooks

unit-tests: $(STAMP)
	@runs=$$(mktemp -d -t b2t_runs.XXXXXX) && trap 'rm -rf "$$runs"' EXIT && \
	B2T_RUNS=$$runs B2T_SCALE=tiny $(BIN)/python -m pytest -m "not slow" tests

# tiny unless B2T_SCALE asks for small or full (refused without a CUDA GPU, exit code 2). The training cells call
# b2t_lib.train.launch.launch: at small/full the runs are detached processes under runs/ (or B2T_RUNS) that outlive
# this command; calling it again re-attaches, skips finished runs and resumes interrupted ones.
course: $(STAMP)
	@mkdir -p build/notebooks build/figures
	@scale=$$(B2T_SCALE=$(B2T_SCALE) $(BIN)/python -c "import b2t_lib.scale as s; raise SystemExit(s.main())") && \
	echo "course scale: $$scale" && \
	for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  B2T_SCALE=$$scale B2T_FIGURE_DIR=$(CURDIR)/build/figures TQDM_DISABLE=1 \
	  $(BIN)/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=-1 \
	    --output-dir build/notebooks $$nb || exit 1; \
	done
	@echo "executed notebooks: build/notebooks/   figures: build/figures/"
	@ls build/figures

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
