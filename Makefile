# fastop's two set-up commands: `make demo` and `make test` (see README.md).
PYTHON ?= python3
# bash with pipefail: the install steps pipe pip's output through a filter (below), and a
# failed pip must fail the step
SHELL := bash
.SHELLFLAGS := -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PLUGINS := $(wildcard plugins/*/pyproject.toml)
# the plugin-contract compatibility packages (tests/plugin_compat/README.md)
COMPAT_PLUGINS := $(wildcard tests/plugin_compat/*/pyproject.toml)

.PHONY: demo test bench bench-quick install dev clean

$(VENV)/bin/python:
	@echo "==> [1/4] creating $(VENV) ($(PYTHON) -m venv) and upgrading its pip"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# pip's verbose log goes to $(VENV)/install.log; what is shown of it: the build's own
# progress (Cython's "[n/N] Cythonizing" per module, setuptools' "building '...'
# extension" per compiled module) and pip's "Successfully installed" lines. A failed step
# prints the end of that log.
INSTALL_LOG := $(VENV)/install.log
SHOW_PROGRESS := sed -nEu -e "s/^ *(\[ *[0-9]+\/[0-9]+\]) Cythonizing (.*)/    cython \1 \2/p" \
	-e "s/^ *building '([^']+)' extension/    compile \1/p" -e "s/^(Successfully installed .*)/    \1/p"
LOGGED_PIP = $(PIP) install -v --no-build-isolation
FAILED = { echo "==> failed: the last 40 lines of $(INSTALL_LOG):"; tail -n 40 $(INSTALL_LOG); exit 1; }

# Build and install fastop (non-editable: tests run against the installed package) with
# its development extras (pyproject.toml: tests, benchmarks, examples), every plugin
# package in plugins/ and the compatibility suite's packages in tests/plugin_compat/
# (non-editable too: the tests find them through their installed entry points).
$(VENV)/.installed: $(VENV)/bin/python setup.py pyproject.toml $(shell find src plugins $(dir $(COMPAT_PLUGINS)) -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' -o -name '*.c' -o -name '*.toml' 2>/dev/null | grep -v '/build/')
	@echo "==> [2/4] build tools: setuptools, wheel, Cython, numpy"
	@: > $(INSTALL_LOG)
	@$(LOGGED_PIP) "setuptools>=77" wheel "Cython>=3.0" "numpy>=1.26" 2>&1 | tee -a $(INSTALL_LOG) | $(SHOW_PROGRESS) || $(FAILED)
	@echo "==> [3/4] fastop with its extras dev and mpi: Cython translates each .pyx to C, the C compiler builds it (a few minutes; pip's full log: $(INSTALL_LOG))"
	@$(LOGGED_PIP) ".[dev,mpi]" 2>&1 | tee -a $(INSTALL_LOG) | $(SHOW_PROGRESS) || $(FAILED)
	@echo "==> [4/4] plugin packages: $(patsubst %/,%,$(dir $(PLUGINS) $(COMPAT_PLUGINS)))"
	@for p in $(dir $(PLUGINS) $(COMPAT_PLUGINS)); do echo "    $$p"; \
		$(LOGGED_PIP) ./$$p 2>&1 | tee -a $(INSTALL_LOG) | $(SHOW_PROGRESS) || $(FAILED); done
	@touch $@
	@echo "==> installed into $(VENV): activate it with '. $(VENV)/bin/activate' (or run $(VENV)/bin/python -m fastop ...)"

install: $(VENV)/.installed

demo: install
	@echo "==> training on digits: $(PY) examples/train_digits.py"
	@$(PY) examples/train_digits.py

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
