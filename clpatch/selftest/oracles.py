"""Where the self-test finds the NumPy oracles: the package `clpatch.oracles`.

The oracles live in the repository's `tests/reference/` and import nothing from clpatch (that is
what lets them catch clpatch's mistakes). The wheel ships that folder as `clpatch.oracles`
(`[tool.setuptools.package-dir]` in pyproject.toml), so an installed clpatch imports it like any
package. A source checkout (or an editable install made before the mapping existed) has no
`clpatch/oracles/` folder: there the same files are loaded from `tests/reference/` under the same
package name, so their relative imports (`from .search import grid`) resolve the same way.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

PACKAGE = "clpatch.oracles"

#: The oracle modules (NumPy only): one per kernel family, plus what they share.
MODULES = ("search", "nlmeans", "bm3d", "vbm3d", "knn", "ann", "nnf", "noise_level")

_CLPATCH = Path(__file__).resolve().parent.parent     # the clpatch package folder


def oracle_dir() -> Path:
    """The folder the oracle modules are read from (inside the package when installed)."""
    for candidate in (_CLPATCH / "oracles", _CLPATCH.parent / "tests" / "reference"):
        if (candidate / "search.py").is_file():
            return candidate
    raise FileNotFoundError(
        f"clpatch cannot find its NumPy oracles (looked in {_CLPATCH / 'oracles'} and "
        f"{_CLPATCH.parent / 'tests' / 'reference'}); the installation is incomplete — "
        "reinstall clpatch")


@cache
def _package() -> ModuleType:
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    if (_CLPATCH / "oracles" / "__init__.py").is_file():
        return importlib.import_module(PACKAGE)
    folder = oracle_dir()
    spec = importlib.util.spec_from_file_location(PACKAGE, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the oracles from {folder}")
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    try:
        spec.loader.exec_module(package)
    except BaseException:
        del sys.modules[PACKAGE]
        raise
    return package


def oracle(name: str) -> ModuleType:
    """The oracle module `name` (one of :data:`MODULES`), e.g. ``oracle("search")``."""
    if name not in MODULES:
        raise ValueError(f"oracle must be one of {MODULES}, got {name!r}")
    _package()
    return importlib.import_module(f"{PACKAGE}.{name}")
