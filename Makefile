# fastop's two set-up commands: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PLUGINS := $(wildcard plugins/*/pyproject.toml)
# the plugin-contract compatibility packages (tests/plugin_compat/README.md)
COMPAT_PLUGINS := $(wildcard tests/plugin_compat/*/pyproject.toml)

.PHONY: demo test bench bench-quick install dev clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Build and install fastop (non-editable: tests run against the installed package) with
# its development extras (pyproject.toml: tests, benchmarks, examples), every plugin
# package in plugins/ and the compatibility suite's packages in tests/plugin_compat/
# (non-editable too: the tests find them through their installed entry points).
$(VENV)/.installed: $(VENV)/bin/python setup.py pyproject.toml $(shell find src plugins $(dir $(COMPAT_PLUGINS)) -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' -o -name '*.c' -o -name '*.toml' 2>/dev/null | grep -v '/build/')
	$(PIP) install --quiet "setuptools>=77" wheel "Cython>=3.0" "numpy>=1.26"
	$(PIP) install --quiet --no-build-isolation ".[dev,mpi]"
	for p in $(dir $(PLUGINS) $(COMPAT_PLUGINS)); do $(PIP) install --quiet --no-build-isolation ./$$p || exit 1; done
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) examples/train_digits.py

test: install
	cd tests && ../$(PY) -m pytest -q -p no:cacheprovider .

# Full benchmark suite, with PyTorch's CPU build (a local wheel) for comparison.
bench: install
	$(PIP) install --quiet torch==2.13.0 scikit-learn
	$(PY) -m fastop bench

bench-quick: install
	$(PY) -m fastop bench --quick

# Developer loop: editable install, rebuild extensions in place.
dev: $(VENV)/bin/python
	$(PIP) install --quiet "setuptools>=77" wheel "Cython>=3.0" "numpy>=1.26" pluggy scipy-openblas32 \
		pytest hypothesis pyperf tqdm matplotlib scikit-learn mpi4py mpich
	$(PY) setup.py -q build_ext --inplace

clean:
	rm -rf build dist src/*.egg-info $(VENV)
	find src -name '*.so' -delete
	find src -name '*.c' ! -name '*_impl.c' -delete
