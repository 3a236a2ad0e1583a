# make demo | test | install | lint | clean
#
# Every target that runs clpatch first creates the virtual environment .venv (when missing,
# or when pyproject.toml changed) with clpatch installed in editable mode, then makes sure a
# working OpenCL device exists (scripts/ensure-opencl.sh installs PoCL through apt-get
# when none does and the user may).

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: all install opencl demo test lint clean

all: test

install: $(STAMP) opencl

# The test extra includes setuptools and wheel: tests/test_wheel.py builds without isolation.
$(STAMP): pyproject.toml
	@if ! $(VPY) -m pip --version >/dev/null 2>&1; then \
		rm -rf $(VENV); \
		$(PYTHON) -m venv $(VENV) || { \
			echo "make: '$(PYTHON) -m venv' failed; on Debian/Ubuntu install python3-venv" \
			     "(apt-get install python3-venv) and run make again" >&2; \
			rm -rf $(VENV); exit 1; }; \
	fi
	$(VPY) -m pip install -U pip
	$(VPY) -m pip install -e '.[test]'
	touch $(STAMP)

opencl: $(STAMP)
	sh scripts/ensure-opencl.sh $(VPY)

demo: $(STAMP) opencl
	$(VENV)/bin/clpatch demo

test: $(STAMP) opencl
	$(VPY) -m pytest

lint: $(STAMP)
	$(VPY) -m ruff check clpatch tests

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
