"""clpatch's own Sphinx extension: three directives that generate parts of the site from the
code, so that they cannot drift from it.

- ``clpatch-api MODULE``: every name of the module's ``__all__`` through autodoc, in the
  groups of `apiref.GROUPS` (a new name lands in "Other names", never nowhere);
- ``clpatch-cli``: the reference of the ``clpatch`` command and every subcommand, read from
  the parser the command builds (`cliref`);
- the free-form docstrings read as reST (`docstrings.to_rest`, before napoleon);
- ``clpatch-figure NAME``: a before/after picture computed when the page is built
  (`figures`), on the default OpenCL device, written into the build tree (``_build/figures``
  beside the HTML), with the numbers measured on it in the caption.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import apiref
import cliref
import docstrings
import figures
from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import clpatch

_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> list[nodes.Node]:
    """Plain text, with `quoted` spans as inline code (the help texts' convention)."""
    parts = _CODE.split(text)
    return [nodes.literal(p, p) if i % 2 else nodes.Text(p) for i, p in enumerate(parts) if p]


def _paragraph(text: str) -> nodes.paragraph:
    return nodes.paragraph("", "", *_inline(text))


class ApiDirective(SphinxDirective):
    """Every public name of a module, through autodoc (reST parsed in place)."""

    required_arguments = 1
    option_spec = {"heading": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        lines = apiref.api_lines(self.arguments[0], self.options.get("heading", "-"))
        self.env.note_dependency(__file__)
        content = StringList(lines, source=f"<clpatch-api {self.arguments[0]}>")
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, content, node)
        return node.children


class CliDirective(SphinxDirective):
    """One section per command: summary, usage, description, arguments, epilog."""

    def run(self) -> list[nodes.Node]:
        out = []
        for command in cliref.commands():
            section = nodes.section(ids=[nodes.make_id(f"cli {command.name}")],
                                    names=[nodes.fully_normalize_name(command.name)])
            section += nodes.title(command.name, "", nodes.literal(command.name, command.name))
            if command.summary:
                section += _paragraph(command.summary[:1].upper() + command.summary[1:] + ".")
            section += nodes.literal_block(command.usage, command.usage, language="text")
            if command.description:
                section += _paragraph(command.description)
            for title, arguments in command.groups:
                section += nodes.rubric(title, title.capitalize())
                items = nodes.definition_list()
                for argument in arguments:
                    term = nodes.term("", "", nodes.literal(argument.invocation, argument.invocation))
                    definition = nodes.definition("", _paragraph(argument.help or "(no help)"))
                    items += nodes.definition_list_item("", term, definition)
                section += items
            if command.epilog:
                section += _paragraph(command.epilog)
            self.state.document.note_implicit_target(section)
            out.append(section)
        return out


class FigureDirective(SphinxDirective):
    """A picture computed now by `figures.make(NAME, ...)`, with its measured caption."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        if name not in figures.FIGURES:
            raise self.error(f"unknown figure {name!r}; known: {', '.join(figures.FIGURES)}")
        outdir = Path(self.env.app.outdir).parent / "figures"
        path, caption = figures.make(name, outdir)
        device = clpatch.default_runtime().device.name.strip()
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        uri = Path(os.path.relpath(path, docdir)).as_posix()
        image = nodes.image(uri=uri, alt=f"{name}: {caption}")
        text = f"{caption}. Computed when this page was built, on {device} (docs/_ext/figures.py)."
        return [nodes.figure("", image, nodes.caption(text, text))]


def _docstring(app: Sphinx, what: str, name: str, obj: object, options: dict,
               lines: list[str]) -> None:
    lines[:] = docstrings.to_rest(lines)


def setup(app: Sphinx) -> dict:
    # Before napoleon (priority 500), which then finds the numpydoc sections left as they are.
    app.connect("autodoc-process-docstring", _docstring, priority=400)
    app.add_directive("clpatch-api", ApiDirective)
    app.add_directive("clpatch-cli", CliDirective)
    app.add_directive("clpatch-figure", FigureDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
