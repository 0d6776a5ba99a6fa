# Everything a fresh machine needs: `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint fuzz torch-suite bench bench-gpu gpu-check docs docs-serve clean

# TORCH_INDEX: where torch and torchvision come from, e.g. PyTorch's CPU-only wheels
# (https://download.pytorch.org/whl/cpu) on a machine without a GPU: 4 GB less of CUDA.
TORCH_INDEX ?=

# The venv is made once; `make demo` installs fastload with what the demo and the README's
# commands after it need only (no test toolchain), `make docs` mkdocs alone, `make test`,
# `lint` and `bench` fastload with the test and docs toolchain (which covers both others).
DEMO_READY := $(VENV)/.demo-installed
DOCS_READY := $(VENV)/.docs-installed
DEV_READY := $(VENV)/.dev-installed
TORCH_FIRST = $(if $(TORCH_INDEX),$(BIN)/python -m pip install --progress-bar on -c constraints.txt --index-url $(TORCH_INDEX) torch torchvision)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(DEMO_READY): pyproject.toml constraints.txt | $(BIN)/python
	@echo "Installing fastload and what the demo needs into $(VENV) (the first time: torch, a few minutes)"
	$(TORCH_FIRST)
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -e '.[demo]'
	touch $@

# The site is built from src/'s docstrings without importing fastload (mkdocstrings reads the
# source), so the docs' install is pyproject.toml's `docs` extra alone: no torch, no fastload.
DOCS_EXTRA = import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"], sep="\n")
$(DOCS_READY): pyproject.toml constraints.txt | $(BIN)/python
	@echo "Installing the docs toolchain (pyproject.toml's docs extra: mkdocs) into $(VENV)"
	$(BIN)/python -c '$(DOCS_EXTRA)' > $(VENV)/docs-requirements.txt
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -r $(VENV)/docs-requirements.txt
	touch $@

$(DEV_READY): pyproject.toml constraints.txt | $(BIN)/python
	@echo "Installing fastload with the test and docs toolchain into $(VENV) (the first time: a few minutes)"
	$(TORCH_FIRST)
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -e '.[dev,docs]'
	@# Azurite, the tests' Azure server, is an npm package: into the venv where npm is
	@if command -v npm >/dev/null; then \
		npm install --prefix $(VENV) --no-audit --no-fund --loglevel=error azurite@3 \
		|| echo "Azurite did not install: the Azure tests will be skipped"; \
	else echo "no npm: the Azure tests will be skipped (npm install --prefix $(VENV) azurite)"; fi
	touch $@ $(DEMO_READY) $(DOCS_READY)

# Two loaders timed alone on generated JPEGs (no model), then fastload.diagnose on a small
# ResNet-18 training loop; afterwards `source .venv/bin/activate` puts fastload on PATH.
demo: $(DEMO_READY)
	$(BIN)/fastload demo

# Everything, slow tests included (a plain `pytest` leaves them out): what CI runs.
test: $(DEV_READY)
	$(BIN)/python -m pytest -q -m "slow or not slow"

lint: $(DEV_READY)
	$(BIN)/ruff check src tests benchmarks examples tools conftest.py mkdocs_hooks.py
	$(BIN)/ruff format --check src tests benchmarks examples tools conftest.py mkdocs_hooks.py
	$(BIN)/mypy

# The differential fuzzer at length (tests/loader/test_differential.py): FUZZ_EXAMPLES generated
# loader configurations in the main process, then as many with workers (about a second each),
# each through DataLoader, FastLoader and FastLoader behind a DataPrefetcher; new configurations
# at each run, the first divergence shrunk and shown.
FUZZ_EXAMPLES ?= 10000
fuzz: $(DEV_READY)
	FASTLOAD_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -x -m "slow or not slow" \
		tests/loader/test_differential.py -k "main_process or workers"

# PyTorch's own DataLoader tests, run with DataLoader and again with FastLoader patched in for it
# (its defaults on): each run's counts, and a failure when a test fails only with FastLoader
# (tools/torch_dataloader_suite.py). TORCH_TEST_FILE is test/test_dataloader.py of the torch you
# target, kept outside this repository; the tests are slow (workers, spawned processes), so
# TORCH_SUITE_K selects some, as pytest's -k: e.g.
# `make torch-suite TORCH_TEST_FILE=../pytorch/test/test_dataloader.py TORCH_SUITE_K=TestDataLoader`
TORCH_TEST_FILE ?=
TORCH_SUITE_K ?=
torch-suite: $(DEV_READY)
	@test -n "$(TORCH_TEST_FILE)" || { echo "make torch-suite TORCH_TEST_FILE=path/to/test_dataloader.py"; exit 2; }
	$(BIN)/python tools/torch_dataloader_suite.py "$(TORCH_TEST_FILE)" $(if $(TORCH_SUITE_K),-k "$(TORCH_SUITE_K)")

bench: $(DEV_READY)
	$(BIN)/python benchmarks/tensor_dataset.py --plot
	$(BIN)/python benchmarks/small_batches.py --plot
	$(BIN)/python benchmarks/loader_defaults.py --plot
	$(BIN)/python benchmarks/lmdb_vs_files.py --plot
	$(BIN)/python benchmarks/cpu_augment.py --plot
	$(BIN)/python benchmarks/end_to_end.py --plot
	$(BIN)/python benchmarks/crop_decode.py --plot
	$(BIN)/python benchmarks/host_path.py --plot
	$(BIN)/python benchmarks/hf_datasets.py --plot
	$(BIN)/python benchmarks/timm_loader.py --plot
	$(BIN)/python benchmarks/peers.py --plot  # peers missing from .venv are reported (benchmarks/install_peers.sh)
	$(BIN)/python benchmarks/docs_page.py  # docs/benchmarks.md, from the results

# The GPU suite (benchmarks/gpu_suite.py). On a GPU machine whose Python already has torch,
# it runs the package from src/ with that Python, no venv: `make bench-gpu PYTHON=python3`.
PARTS ?= all
BUDGET ?= 3600
SUITE_PYTHON = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
bench-gpu:
	PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} $(SUITE_PYTHON) benchmarks/gpu_suite.py --parts $(PARTS) --budget-s $(BUDGET)
	$(SUITE_PYTHON) benchmarks/docs_page.py

# What a short GPU window measures first (benchmarks/gpu_check.py): the new CUDA paths' tests,
# decoding, ResNet-18 and -50 end to end, memory, in one command within 540 s. Without CUDA,
# the same plan at smoke sizes into a scratch folder. Prepare a device call with
# `python benchmarks/gpu_prepare.py`; on the GPU machine, benchmarks/gpu_check.sh runs this.
gpu-check:
	PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} $(SUITE_PYTHON) benchmarks/gpu_check.py
	$(SUITE_PYTHON) benchmarks/docs_page.py

# The documentation site (mkdocs.yml): built strictly (a warning or a broken link fails it)
# into site/, after docs/benchmarks.md is rewritten from benchmarks/results/. Its install is
# the docs toolchain alone, or the test venv where `make test` made one (as in CI).
docs: $(DOCS_READY)
	$(BIN)/python benchmarks/docs_page.py
	$(BIN)/mkdocs build --strict --site-dir site

# The site on http://127.0.0.1:8000, rebuilt as you edit docs/ or a docstring.
docs-serve: $(DOCS_READY)
	$(BIN)/python benchmarks/docs_page.py
	$(BIN)/mkdocs serve --watch src

clean:
	rm -rf $(VENV) benchmarks/.data site
