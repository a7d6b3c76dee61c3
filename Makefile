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

.PHONY: setup test test-portable unit-tests course lab notebooks clean help

help:
	@echo "make course     run every notebook at the scale this machine allows; notebooks + figures under build/"
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

test: $(STAMP)
	B2T_SCALE=tiny $(BIN)/python -m pytest $(NBVAL) tests notebooks

test-portable: $(STAMP)
	B2T_SCALE=tiny $(PORTABLE_ENV) $(BIN)/python -m pytest $(NBVAL) notebooks

unit-tests: $(STAMP)
	B2T_SCALE=tiny $(BIN)/python -m pytest -m "not slow" tests

course: $(STAMP)
	@mkdir -p build/notebooks build/figures
	@scale=$$(B2T_SCALE=$(B2T_SCALE) $(BIN)/python -m b2t_lib.scale) && echo "course scale: $$scale" && \
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
	@for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  B2T_SCALE=tiny TQDM_DISABLE=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=-1 $$nb || exit 1; \
	done

clean:
	rm -rf build
