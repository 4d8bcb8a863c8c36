# The two set-up commands of the README: `make tour` and `make test`.
# Each creates .venv when it is missing and installs tflab into it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tflab-installed

export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: tour test install bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

tour: $(STAMP)
	$(BIN)/tflab tour

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info custom_ops/_build
