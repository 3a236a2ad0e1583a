# make demo | test | test-slow | install | lint | docs | clean
#
# Every target that runs clpatch first creates the virtual environment .venv (when missing,
# or when pyproject.toml changed) with clpatch installed in editable mode (`make demo`: the
# package alone; the test targets add its test extra), then makes sure a working OpenCL
# device exists (scripts/ensure-opencl.sh installs PoCL through apt-get when none does and
# the user may).

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
BASE   := $(VENV)/.installed-package
STAMP  := $(VENV)/.installed
DOCS   := $(VENV)/.installed-docs
INTEL  ?= 1

.PHONY: all install opencl demo test test-slow lint docs clean

all: test

install: $(STAMP) opencl

# The package alone (what `make demo` needs).
$(BASE): pyproject.toml
	@if ! $(VPY) -m pip --version >/dev/null 2>&1; then \
		rm -rf $(VENV); \
		$(PYTHON) -m venv $(VENV) || { \
			echo "make: '$(PYTHON) -m venv' failed; on Debian/Ubuntu install python3-venv" \
			     "(apt-get install python3-venv) and run make again" >&2; \
			rm -rf $(VENV); exit 1; }; \
	fi
	$(VPY) -m pip install -U pip
	$(VPY) -m pip install -e .
	touch $(BASE)

# With the test extra (pytest, hypothesis, Oclgrind, Dask, ruff...); it includes setuptools
# and wheel: tests/test_wheel.py builds without isolation.
$(STAMP): $(BASE)
	$(VPY) -m pip install -e '.[test]'
	touch $(STAMP)

opencl: $(BASE)
	sh scripts/ensure-opencl.sh $(VPY)

demo: $(BASE) opencl
	$(VENV)/bin/clpatch demo

# The suite on the default devices, then on Intel's OpenCL CPU runtime, installed into
# .opencl/intel (scripts/run-tests.sh; INTEL=0 skips Intel's part).
test: $(STAMP) opencl
	INTEL=$(INTEL) sh scripts/run-tests.sh $(VPY)

# The long sweeps left out of `make test` (marker slow): for the GPU machine and by hand.
test-slow: $(STAMP) opencl
	CLPATCH_SLOW=1 $(VPY) -m pytest -m slow

# With the docs extra (Sphinx, myst-parser).
$(DOCS): $(BASE)
	$(VPY) -m pip install -e '.[docs]'
	touch $(DOCS)

# The documentation site into docs/_build/html, warnings as errors. The method pages'
# pictures are computed during the build on the default OpenCL device (docs/_ext/figures.py).
docs: $(DOCS) opencl
	$(VPY) -m sphinx -b html -W --keep-going -q -d docs/_build/doctrees docs docs/_build/html
	@echo "make docs: open docs/_build/html/index.html"

lint: $(STAMP)
	$(VPY) -m ruff check clpatch tests

clean:
	rm -rf $(VENV) .opencl build dist *.egg-info .pytest_cache .ruff_cache docs/_build
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
