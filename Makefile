# Quick start: `make demo` runs the demo, `make test` runs the test suite, `make train` the
# training demo.
# Each target creates the virtual environment .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo train test bench venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench,tf,examples]'
	$(BIN)/pip install --quiet torch==2.13.0
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

train: $(STAMP)
	$(BIN)/python examples/train_digits.py

test: $(STAMP)
	$(BIN)/python -m pytest -n auto -q

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
