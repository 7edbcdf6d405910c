# Two commands set everything up: `make demo` runs the main job, `make test` runs the tests.
# Each creates the virtual environment in .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Pin torch first so that the rest resolves against it (an unpinned torch pulls CUDA wheels).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: env demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	$(BIN)/weightgraft demo $(DEMO_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(TEST_ARGS)

# Lint and formatting check; `ruff format src tests benchmarks` applies the formatting.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_scale.py
	$(BIN)/python benchmarks/bench_runner.py
	$(BIN)/python benchmarks/bench_attribution.py
	$(BIN)/python benchmarks/bench_fine.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
