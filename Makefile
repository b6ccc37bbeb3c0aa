# Quick start: `make demo` runs the demo, `make test` runs the test suite, `make train` the
# training demo, `make zoo` builds and checks the model zoo, `make ray` the Ray example.
# Each target creates the virtual environment .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo train test bench zoo venv clean ray

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

# Batch inference on Ray (README, Batch inference on Ray): myelin and ONNX Runtime on one job.
ray: $(STAMP)
	$(BIN)/python examples/ray_batch.py

# The model zoo (README, Model zoo): build the models (a failed build is reported, not fatal),
# then check them all against ONNX Runtime.
$(VENV)/.zoo-installed: $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[zoo]'
	touch $@

zoo: $(VENV)/.zoo-installed
	-$(BIN)/python benchmarks/zoo/build.py
	$(BIN)/python benchmarks/zoo/run.py

clean:
	rm -rf $(VENV) build *.egg-info
