"""Test devices: every test taking `runtime` runs once per device.

Devices come from CLPATCH_TEST_DEVICES (comma-separated `P:D` indices or name substrings),
else every non-simulator OpenCL device found. Oclgrind is used by the oclgrind tests only.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import clpatch
from clpatch.core.devices import is_simulator, list_devices

# Tests never read the user's tuning cache: tuned choices would change which configuration
# runs (never the results), and some tests check the rule-based choice.
# The folder goes when the process ends (each pytest-xdist worker has its own).
_TUNING_DIR = tempfile.mkdtemp(prefix="clpatch-tests-")
atexit.register(shutil.rmtree, _TUNING_DIR, True)
os.environ["CLPATCH_TUNING"] = str(Path(_TUNING_DIR) / "tuning.json")

_runtimes: dict[str, clpatch.Runtime] = {}


def device_specs() -> list[tuple[str, str]]:
    """(spec, id) pairs of the devices tests run on."""
    env = os.environ.get("CLPATCH_TEST_DEVICES", "").strip()
    entries = list_devices()
    if env:
        specs = [s.strip() for s in env.split(",") if s.strip()]
        out = []
        for spec in specs:
            device = clpatch.select_device(spec)
            out.append((spec, device.name.strip()[:24].replace(" ", "_")))
        return out
    return [(e.index, e.device.name.strip()[:24].replace(" ", "_"))
            for e in entries if not is_simulator(e.device)]




def runtime_for(spec: str, **kwargs) -> clpatch.Runtime:
    key = repr((spec, sorted(kwargs.items())))
    if key not in _runtimes:
        _runtimes[key] = clpatch.Runtime(spec, **kwargs)
    return _runtimes[key]


def pytest_generate_tests(metafunc):
    if "runtime" in metafunc.fixturenames:
        specs = device_specs()
        metafunc.parametrize("runtime", [s for s, _ in specs], ids=[i for _, i in specs],
                             indirect=True, scope="session")


@pytest.fixture(scope="session")
def runtime(request):
    return runtime_for(request.param)


#: The test folders and modules whose device tests hold the kernel families to their oracles
#: (test_profiles: every profile family forced on the device): marked `every_vendor`, they
#: run on every OpenCL implementation CI has (scripts/run-tests.sh).
EVERY_VENDOR = ("match", "denoise", "core/test_profiles.py")


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    for item in items:
        where = Path(str(item.fspath)).resolve().relative_to(tests).as_posix()
        if "runtime" in getattr(item, "fixturenames", ()) and any(
                where == place or where.startswith(place + "/") for place in EVERY_VENDOR):
            item.add_marker(pytest.mark.every_vendor)
    if os.environ.get("CLPATCH_SLOW", "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason="slow sweep: set CLPATCH_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
