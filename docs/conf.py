"""Sphinx configuration of clpatch's documentation site: `make docs` builds it into
docs/_build/html with warnings as errors (`sphinx -W --keep-going`).

The pages are the Markdown files of docs/ (read by myst-parser, so they stay readable on a
forge and their ```python blocks stay runnable by tests/test_docs_examples.py); the API
reference (api.rst) is autodoc over `clpatch.__all__`; docs/_ext/clpatch_docs.py generates
what must follow the code: the API page's entries, the command-line reference and the
pictures of the method pages (see that module).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import clpatch  # noqa: E402

project = "clpatch"
release = version = clpatch.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "clpatch_docs"]
root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# docs/README.md is the forge's index of these pages; index.md is the site's.
exclude_patterns = ["_build", "README.md"]
# `name` in a docstring is code, and a link where it names a documented object.
default_role = "py:obj"
# Anchors for the Markdown headings, so pages can link to page.md#a-section.
myst_heading_anchors = 3

autodoc_member_order = "bysource"
# The docstrings say the types and shapes; hints in long signatures only make them longer.
autodoc_typehints = "none"
# Runtime's docstring has numpydoc sections; the others are free-form (docs/_ext/docstrings.py).
napoleon_google_docstring = False

html_theme = "alabaster"
html_theme_options = {"page_width": "1240px", "sidebar_width": "240px", "body_max_width": "none"}
# Help texts and docstrings write options as --name: no en dashes, no curly quotes.
smartquotes = False
html_title = f"clpatch {release}"
