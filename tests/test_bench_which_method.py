"""benchmarks/bench_which_method.py (the table of docs/which-method.md, run on the GPU
machine): its --tiny run on the first test device writes the table, with a wall clock, a
kernel time from the plan's profiling events and a quality for each row asked for (three
rows here, one per kind of quality; `CLPATCH_SLOW=1` runs every row)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import device_specs

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_which_method.py"
ROWS = ["nlmeans", "search_patches", "nnf"]


def run_script(tmp_path: Path, only: list[str]) -> list[str]:
    out = tmp_path / "which.md"
    args = [sys.executable, str(SCRIPT), str(out), "--tiny", "--device", device_specs()[0][0]]
    if only:
        args += ["--only", *only]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in out.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| group")]


def check(rows: list[str], methods: list[str]) -> None:
    assert [r.split(" | ")[1] for r in rows] == methods
    for row in rows:
        cells = row.split(" | ")
        float(cells[3]), float(cells[4])  # wall and kernel ms
        assert "dB" in cells[5] or "the exact" in cells[5], row


def test_tiny_run_writes_the_table(tmp_path):
    check(run_script(tmp_path, ROWS), ROWS)


@pytest.mark.slow
def test_tiny_run_of_every_row(tmp_path):
    rows = run_script(tmp_path, [])
    check(rows, [r.split(" | ")[1] for r in rows])
    assert len(rows) == 10
