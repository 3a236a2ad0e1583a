"""benchmarks/identity.py: `run` one cheap method on the first test device, in a child
process, and `compare` two copies of its file (an identity table that says identical)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from tests.conftest import device_specs

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "identity.py"


def load_script():
    spec = importlib.util.spec_from_file_location("identity_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module               # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_run_then_compare_two_copies_says_identical(tmp_path, capsys):
    identity = load_script()
    device = device_specs()[0][0]
    first = tmp_path / "a.npz"
    assert identity.main(["run", "--device", device, "--out", str(first), "--label", "one",
                          "--methods", "search/gray8/naive"]) == 0
    with np.load(first, allow_pickle=False) as data:
        meta = json.loads(str(data["meta.json"]))
        positions = data["method/search/gray8/naive/positions"]
        assert data["input/gray8"].dtype == np.uint8
    assert list(meta["methods"]) == ["search/gray8/naive"]
    entry = meta["methods"]["search/gray8/naive"]
    assert entry["status"] == "ok" and entry["rule"] == "bit-identical", entry
    assert positions.shape[-2:] == (16, 2) and meta["device"] and meta["clpatch_revision"]

    second = tmp_path / "b.npz"
    shutil.copy(first, second)
    table = tmp_path / "table.md"
    assert identity.main(["compare", str(first), str(second), "--markdown", str(table)]) == 0
    text = table.read_text()
    assert text in capsys.readouterr().out        # printed as well as written
    for output in ("positions", "distances"):
        assert (f"| search/gray8/naive | {output} | bit-identical | 0 (identical) | holds |"
                in text)
    assert "breaking the rule: none" in text


def test_difference_counts_and_crash_cells():
    identity = load_script()
    a = np.array([1.0, 2.0, np.inf], np.float32)
    assert identity.difference(a, a.copy()) == (True, 0.0, 0)
    b = np.array([1.0, 2.5, np.inf], np.float32)
    assert identity.difference(a, b) == (False, 0.5, 1)
    method = {"rule": "bit-identical", "family": "search", "scale": 1.0}
    crashed = {"status": "crash (signal SIGSEGV)", "outputs": []}
    cell, state = identity._cell("m", "positions", method, ("A", {"status": "ok"}, {}),
                                 ("B", crashed, {}))
    assert (cell, state) == ("crash on B (signal SIGSEGV)", "untested")
