"""Real crashes for the crash-containment tests: `arm(request, VARIABLE=value)` makes the
child processes started during the test load `sitecustomize.py` of this folder, which kills
the child by a signal where the variable says (see that file). This process is never armed:
the hook only takes effect in a Python that starts with this folder on its path.

Idle build children are closed when the hook is armed and at the end of the test, so a test
never reuses a child started with another test's environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clpatch.core import buildchild

FOLDER = Path(__file__).resolve().parent


def arm(request: pytest.FixtureRequest, **variables: str) -> None:
    """Arm the hook for the child processes started from now on, until the test ends."""
    monkeypatch = request.getfixturevalue("monkeypatch")
    buildchild.close_idle()
    request.addfinalizer(buildchild.close_idle)
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FOLDER)] + ([path] if path else [])))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
