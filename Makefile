# Everything a fresh machine needs: `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/fastload: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

demo: $(BIN)/fastload
	$(BIN)/fastload demo

test: $(BIN)/fastload
	$(BIN)/python -m pytest -q

lint: $(BIN)/fastload
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

bench: $(BIN)/fastload
	$(BIN)/python benchmarks/tensor_dataset.py --plot
	$(BIN)/python benchmarks/loader_defaults.py --plot
	$(BIN)/python benchmarks/prefetch.py --plot
	$(BIN)/python benchmarks/lmdb_vs_files.py --plot
	$(BIN)/python benchmarks/cpu_augment.py --plot
	$(BIN)/python -m pip install -q kornia  # the gpu_augment comparison, not a dependency
	$(BIN)/python benchmarks/gpu_augment.py --count 256 --plot
	$(BIN)/python benchmarks/gpu_decode.py --plot
	$(BIN)/python benchmarks/end_to_end.py --plot

clean:
	rm -rf $(VENV) benchmarks/.data
