"""The README and the pages of docs/: the README stays an overview (at most 200 lines) whose
links all lead to files of the project, its first example runs as written, and so does the
pipeline example of docs/pipelines.md (on each test device, chosen through CLPATCH_DEVICE,
which `select_device(None)` reads)."""

from __future__ import annotations

import re
from pathlib import Path

import clpatch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PIPELINES = ROOT / "docs" / "pipelines.md"


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown text."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def use_test_device(runtime, monkeypatch) -> None:
    spec = next(f"{e.platform_index}:{e.device_index}" for e in clpatch.list_devices()
                if e.device == runtime.device)
    monkeypatch.setenv("CLPATCH_DEVICE", spec)


def test_readme_is_an_overview_with_working_links():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_the_first_example_runs_as_written(runtime, monkeypatch, capsys):
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert blocks, "the README lost its first example"
    use_test_device(runtime, monkeypatch)
    scope = {"__name__": "readme"}
    exec(compile(blocks[0], "README.md (first example)", "exec"), scope)
    assert scope["clean"].shape == scope["noisy"].shape
    assert capsys.readouterr().out.startswith("Matches(")


def test_the_pipeline_example_runs_as_written(runtime, monkeypatch, capsys):
    blocks = [b for b in python_blocks(PIPELINES.read_text(encoding="utf-8"))
              if "make_plan(\"bm3d\"" in b]
    assert len(blocks) == 1, "docs/pipelines.md lost its example"
    use_test_device(runtime, monkeypatch)
    exec(compile(blocks[0], "docs/pipelines.md (pipeline example)", "exec"),
         {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert printed.startswith("(23, 31, 16, 2) [ 0. "), printed
