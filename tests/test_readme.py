"""The README's pipeline example runs as written (on each test device, chosen through
CLPATCH_DEVICE, which its `select_device(None)` reads)."""

from __future__ import annotations

import re
from pathlib import Path

import clpatch

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown text."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_pipeline_example_runs_as_written(runtime, monkeypatch, capsys):
    section = README.read_text(encoding="utf-8").split("## Pipelines", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in python_blocks(section) if "make_plan(\"bm3d\"" in b]
    assert len(blocks) == 1, "the README's pipeline section lost its example"
    spec = next(f"{e.platform_index}:{e.device_index}" for e in clpatch.list_devices()
                if e.device == runtime.device)
    monkeypatch.setenv("CLPATCH_DEVICE", spec)
    exec(compile(blocks[0], "README.md (pipeline example)", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert printed.startswith("(23, 31, 16, 2) [ 0. "), printed
