# The two set-up commands of the README: `make tour` and `make test`.
# Each creates .venv when it is missing and installs tflab into it.
# The newest WORKING python3.13 … python3.10, then python3 (TF 2.21 and
# ai-edge-litert ship wheels for CPython 3.10–3.13; CI tests 3.11). Each
# candidate is run, not just found: a pyenv shim for a version that is not
# installed is on PATH but fails.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in python3.13 python3.12 python3.11 python3.10 python3; do \
            $$p -c 'import sys; assert (3, 10) <= sys.version_info[:2] < (3, 14)' >/dev/null 2>&1 \
            && { command -v $$p; break; }; done)
endif
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tflab-installed

export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: tour test install bench clean onednn-files

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || test -n "$(PYTHON)" || { \
	  echo "make: no working python3.13, 3.12, 3.11, 3.10 or python3 (3.10-3.13) on PATH; install one or pass PYTHON=/path/to/python3.X" >&2; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

tour: $(STAMP)
	$(BIN)/tflab tour --force

# Four passes. The main one runs everything not marked `onednn`, in the default
# configuration, on pytest-xdist workers: one more than the schedulable CPUs (a test often waits
# on a child it started or on a time limit; with one worker per CPU, 2 cores were ~90 % busy, with
# three workers ~98 %), at most 4 (each holds a TensorFlow of ~2-3 GiB), a test file per worker (--dist loadfile: a file's fixtures are
# built once); TEST_JOBS=1 runs it in one process. A failing main pass stops the target.
# The tests marked `onednn` depend on TF's CPU kernel path (oneDNN or Eigen) and the ISA that
# oneDNN, XLA and WarpSoftmax generate code for: tests/_onednn_passes.py runs them with
# TF_ENABLE_ONEDNN_OPTS=0, with oneDNN forced on and every ISA cap at AVX2 (what an AVX2-only
# CPU runs; skipped, with a line saying so, on a CPU that is at AVX2 or below already, where it
# would repeat the next pass), and with oneDNN forced on, whatever this CPU's default is: one
# pytest process per configuration, all at the same time when TEST_JOBS is 2 or more (one
# after the other otherwise), each pass's output printed whole, a failing pass's last (CI reads
# the last summary line). `python -m tflab.runtime --capped-env` prints the caps that lower
# this CPU (ONEDNN_MAX_CPU_ISA, XLA_FLAGS, TFLAB_WARP_SOFTMAX_ISA).
# The onednn passes collect only the test files that carry the marker (pytest would otherwise
# import all ~130 test modules to deselect 95% of them); tests/tour/test_tour_speed.py checks
# this list against the marker pytest itself collects.
ONEDNN_FILES := $(shell grep -rlE 'mark\.onednn' tests --include='test_*.py' | sort)
TEST_JOBS ?= $(shell $(BIN)/python -c "import os; n = len(os.sched_getaffinity(0)); print(min(4, n + 1) if n > 1 else 1)" 2>/dev/null || echo 1)

test: $(STAMP)
	@caps="$$($(BIN)/python -m tflab.runtime --capped-env)"; \
	  if [ -n "$$caps" ]; then echo "make test: pass 3 emulates an AVX2 CPU: $$caps"; \
	  else echo "make test: pass 3 (ISA caps at AVX2) skipped: this CPU is at AVX2 or below, so pass 4 (oneDNN on) runs what it would"; fi
	$(BIN)/python -m pytest -q --durations=15 -n $(TEST_JOBS) --dist loadfile -m "not onednn" --tflab-traces-json saved_models/test-traces.json
	$(BIN)/python tests/_onednn_passes.py --jobs $(TEST_JOBS) $(ONEDNN_FILES)

onednn-files:
	@echo $(ONEDNN_FILES)

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info custom_ops/_build
