"""clpatch's docstrings as reST, for autodoc.

The docstrings are free-form prose written for `help()`, not numpydoc: arguments are listed
as ``name: text`` lines whose continuation lines hang indented, and values are written as
`name` or |value|. Read as reST, the hanging indents are block quotes that end without a
blank line and |value| is a substitution, so Sphinx warns on nearly every function. Instead of
rewriting every docstring, `to_rest` reads that convention: continuation lines are joined to
their line, every ``name: text`` line but the summary becomes an item of a bullet list with the names as code,
other lines stay paragraphs, and ``|`` is escaped outside code. Docstrings that are already
structured (numpydoc sections with a dashed underline, or a ``::`` literal block) are left
as they are, for napoleon and docutils.

Pure Python (no Sphinx import); tests/test_docs_site.py checks it on the docstrings.
"""

from __future__ import annotations

import re

#: `patch_size, step: ...` or `n: ...` at the start of a logical line.
ENTRY = re.compile(r"^((?:[A-Za-z_][\w.]*|\*\*?\w+)(?:, ?(?:[A-Za-z_][\w.]*|\*\*?\w+))*):\s+(.*)$")
#: A line that starts a bullet of a list written in the docstring.
BULLET = re.compile(r"^[-*] ")
STRUCTURED = re.compile(r"^\s*(-{3,}|={3,})\s*$")
CODE = re.compile(r"(`[^`]*`)")


def is_structured(lines: list[str]) -> bool:
    """numpydoc sections (a dashed underline) or literal blocks (a line ending in ::)."""
    return any(STRUCTURED.match(line) or line.rstrip().endswith("::") for line in lines)


def _escape(text: str) -> str:
    """`|` escaped outside `code` spans (|value| is not a substitution); a trailing
    underscore after a word is left (targets are rare and harmless in prose)."""
    return "".join(part if part.startswith("`") else part.replace("|", r"\|")
                   for part in CODE.split(text))


def logical_lines(lines: list[str]) -> list[str]:
    """Lines with their indented continuation lines joined; blank lines kept as ''."""
    out: list[str] = []
    for line in lines:
        if not line.strip():
            out.append("")
        elif line[:1].isspace() and out and out[-1]:
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.strip())
    return out


def to_rest(lines: list[str]) -> list[str]:
    """The reST of a free-form docstring (its lines as autodoc gives them, dedented)."""
    if is_structured(lines):
        return [_escape(line) for line in lines]
    out: list[str] = []
    previous = "blank"
    for i, line in enumerate(logical_lines(lines)):
        if not line:
            kind = "blank"
        elif i and (ENTRY.match(line) or BULLET.match(line)):  # the first line is a summary
            kind = "item"
        else:
            kind = "text"
        if kind == "item":
            match = ENTRY.match(line)
            if match:
                names = ", ".join(f"``{n.strip()}``" for n in match.group(1).split(","))
                line = f"- {names}: {match.group(2)}"
            if previous == "text":
                out.append("")
        elif kind == "text" and previous == "item":
            out.append("")
        if kind != "blank" or previous != "blank":
            out.append(_escape(line) if kind != "blank" else "")
        previous = kind
    while out and not out[-1]:
        out.pop()
    return out + [""]
