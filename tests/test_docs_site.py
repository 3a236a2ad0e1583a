"""The documentation site's generated parts (docs/_ext, built by `make docs`): the API
reference holds every name of `clpatch.__all__` and of the compat modules, the command-line
reference every command of the parser, every method page a picture computed at build time;
every page is in the site's table of contents and in docs/README.md; the free-form
docstrings become reST as docs/_ext/docstrings.py says. Sphinx itself is not needed here
(CI builds the site with warnings as errors in its own step)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import clpatch
from clpatch.cli.main import build_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import apiref  # noqa: E402
import cliref  # noqa: E402
import docstrings  # noqa: E402

API_MODULES = ["clpatch", "clpatch.compat.skimage", "clpatch.compat.bm3d"]
METHOD_PAGES = {"nlmeans": ["nlmeans"], "bm3d": ["bm3d", "cbm3d"], "vbm3d": ["vbm3d"],
                "burst": ["burst"], "patch-search": ["search"], "knn": ["knn"], "ann": ["ann"],
                "nnf": ["nnf"]}


def pages() -> list[str]:
    return sorted(p.stem for p in [*DOCS.glob("*.md"), *DOCS.glob("*.rst")]
                  if p.name not in ("README.md", "index.md"))


@pytest.mark.parametrize("module", API_MODULES)
def test_api_reference_documents_every_public_name(module):
    api_page = (DOCS / "api.rst").read_text(encoding="utf-8")
    assert f".. clpatch-api:: {module}\n" in api_page
    text = "\n".join(apiref.api_lines(module))
    names = apiref.public_names(__import__(module, fromlist=["__all__"]))
    missing = [n for n in names if not re.search(rf"::\s+{re.escape(module)}\.{re.escape(n)}\b", text)]
    assert not missing, f"{module}: not in the API reference: {missing}"
    grouped = [n for _, members in apiref.groups(module) for n in members]
    assert sorted(grouped) == sorted(names), "a name is in two groups or in none"


def test_a_new_public_name_lands_in_other_names(monkeypatch):
    monkeypatch.setattr(clpatch, "__all__", [*clpatch.__all__, "list_devices_again"], raising=True)
    monkeypatch.setattr(clpatch, "list_devices_again", lambda: None, raising=False)
    assert apiref.groups("clpatch")[-1] == ("Other names", ["list_devices_again"])
    assert ".. autofunction:: clpatch.list_devices_again" in apiref.api_lines("clpatch")


def test_cli_reference_has_every_command():
    assert "```{clpatch-cli}" in (DOCS / "cli-reference.md").read_text(encoding="utf-8")
    found = {c.name for c in cliref.commands()}
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert found == {"clpatch"} | {f"clpatch {name}" for name in subcommands}
    search = next(c for c in cliref.commands() if c.name == "clpatch search")
    options = [a.invocation for _, args in search.groups for a in args]
    assert any("--patch-size" in o for o in options) and search.usage.startswith("clpatch search")
    assert all("%(" not in a.help for c in cliref.commands() for _, args in c.groups for a in args)


def test_every_method_page_has_its_build_time_picture():
    import figures

    for page, names in METHOD_PAGES.items():
        text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
        assert re.findall(r"```\{clpatch-figure\} (\w+)", text) == names, page
    used = {n for names in METHOD_PAGES.values() for n in names}
    assert used == set(figures.FIGURES)


def test_every_page_is_in_the_site_and_the_forge_index():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    toc = {line.strip() for block in re.findall(r"```\{toctree\}(.*?)```", index, flags=re.S)
           for line in block.splitlines() if line.strip() and not line.startswith(":")}
    assert toc == set(pages())
    forge = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {Path(t).stem for t in re.findall(r"\]\(([^)#]+)", forge) if not t.startswith("..")}
    assert set(pages()) <= linked, set(pages()) - linked


def test_free_form_docstrings_become_rest():
    lines = ["Denoise an image.", "", "image: (H, W) or (H, W, C),", "       any dtype.",
             "patch_size, step: patch side and grid step.", "Returns float32; the peak |value|.",
             ""]
    assert docstrings.to_rest(lines) == [
        "Denoise an image.", "", "- ``image``: (H, W) or (H, W, C), any dtype.",
        "- ``patch_size``, ``step``: patch side and grid step.", "",
        r"Returns float32; the peak \|value\|.", ""]
    assert docstrings.to_rest(["clpatch: the summary line.", ""]) == ["clpatch: the summary line.", ""]
    numpydoc = ["Summary.", "", "Parameters", "----------", "x:", "    the x."]
    assert docstrings.to_rest(numpydoc) == numpydoc


def shell_lines(text: str) -> list[str]:
    """The commands of the ```sh blocks of a Markdown text (comments and prompts dropped)."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_shell_blocks_name_real_commands_and_targets():
    """The shell blocks of the README and docs/ are not run (they install, or take minutes),
    but each `clpatch ...` line must parse with the command's own parser and each `make X`
    name a target of the Makefile."""
    import shlex

    makefile = (DOCS.parent / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    checked = 0
    for page in [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]:
        for line in shell_lines(page.read_text(encoding="utf-8")):
            words = shlex.split(line.split(">")[0])
            if words[0] == "clpatch":
                try:
                    build_parser().parse_args(words[1:])
                except SystemExit as exc:  # --help
                    assert exc.code == 0, f"{page.name}: {line}"
                checked += 1
            elif words[0] == "make":
                assert all(w in targets for w in words[1:] if "=" not in w), f"{page.name}: {line}"
                checked += 1
    assert checked >= 6
