"""The wheel: built from the checkout, installed into a fresh virtual environment without
network access, it must ship the kernel templates, device profiles and sample image and
run a search from there (not from the checkout); it must also ship the NumPy oracles of
tests/reference as `clpatch.oracles`, so that `clpatch selftest` runs from the installed wheel."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import device_specs

pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[1]
# Imported by clpatch at run time (with what they import in turn).
RUNTIME_MODULES = ("numpy", "pyopencl", "pytools", "mako", "markupsafe", "PIL", "platformdirs",
                   "typing_extensions", "siphash24", "tomli")
# Build outputs and caches that must not go into the build (a stale build/ folder would
# ship files that no longer exist in the checkout).
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".ruff_cache", ".gpu", ".whl")


def _build_backend_problem() -> str | None:
    """Why `pip wheel --no-build-isolation` cannot work in this environment, or None."""
    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        return "setuptools is not installed"
    major_minor = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if major_minor < (68,):
        return f"setuptools {version} is older than pyproject.toml's setuptools>=68"
    if major_minor < (70, 1) and importlib.util.find_spec("wheel") is None:
        return f"setuptools {version} needs the 'wheel' package to build wheels"
    return None


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600,
                          **kwargs)
    assert done.returncode == 0, (f"{' '.join(str(c) for c in cmd)} failed ({done.returncode}):\n"
                                  f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}")
    return done


def _leaks_clpatch(folder: Path) -> bool:
    """Whether a site-packages folder holds clpatch itself or an editable-install hook for it."""
    return any("clpatch" in entry.name.lower() for entry in folder.iterdir())


def dependency_path(tmp_path: Path) -> list[Path]:
    """Folders that give the new venv this environment's dependencies, but never clpatch.

    A folder that also holds clpatch (an install, or the editable install's finder and .pth)
    is not used directly: its other entries are symlinked into a private folder instead.
    """
    folders: list[Path] = []
    for name in RUNTIME_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            continue
        origin = Path(spec.origin)
        folder = origin.parent.parent if origin.name == "__init__.py" else origin.parent
        if folder not in folders:
            folders.append(folder)
    out = []
    for k, folder in enumerate(folders):
        if not _leaks_clpatch(folder):
            out.append(folder)
            continue
        private = tmp_path / f"deps{k}"
        private.mkdir()
        for entry in folder.iterdir():
            if "clpatch" in entry.name.lower() or entry.suffix == ".pth":
                continue
            (private / entry.name).symlink_to(entry)
        out.append(private)
    return out


def _venv_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    specs = device_specs()
    if specs:
        env["CLPATCH_DEVICE"] = specs[0][0]
    return env


CHECK = textwrap.dedent("""
    import sys
    from pathlib import Path

    import numpy as np

    import clpatch
    from clpatch.core import resources as _resources

    venv = Path(sys.prefix).resolve()
    assert sys.prefix != sys.base_prefix, "not running in the new venv"
    for name, path in [("clpatch", clpatch.__file__), ("cl_src", _resources.cl_src_dir()),
                       ("device_profiles", _resources.profiles_dir()),
                       ("sample image", _resources.sample_image_path())]:
        path = Path(path).resolve()
        assert path.is_relative_to(venv), f"{name} comes from {path}, not from {venv}"
        assert path.exists(), f"{name}: {path} is missing"
    templates = sorted(p.relative_to(_resources.cl_src_dir()).as_posix()
                       for p in _resources.cl_src_dir().glob("**/*.cl.mako"))
    headers = sorted(p.name for p in (_resources.cl_src_dir() / "lib").glob("*.mako"))
    profiles = sorted(p.stem for p in _resources.profiles_dir().glob("*.toml"))
    assert "match/search.cl.mako" in templates and headers, (templates, headers)
    assert set(profiles) >= {"nvidia", "amd", "intel", "cpu", "generic"}, profiles

    image = np.random.default_rng(0).random((20, 24)).astype(np.float32) * 255
    result = clpatch.search_patches(image, 8, 4, 9, 4)
    assert result.positions.shape == (len(result.grid_y), len(result.grid_x), 4, 2)
    assert np.all(result.distances[..., 0] == 0), "a reference is its own best match"
    assert np.all(np.diff(result.distances, axis=-1) >= 0)
    print("installed clpatch ok:", clpatch.__file__, result.config.describe())

    from clpatch.selftest import oracle, oracle_dir
    from clpatch.selftest.oracles import MODULES

    assert oracle_dir().resolve().is_relative_to(venv), f"oracles come from {oracle_dir()}"
    for name in MODULES:
        module = oracle(name)
        assert module.__name__ == f"clpatch.oracles.{name}", module.__name__
        assert Path(module.__file__).resolve().is_relative_to(venv), module.__file__
    print("installed oracles ok:", oracle_dir())
""")

#: A few self-test families whose oracles import each other (vbm3d: bm3d and search).
SELFTEST_FAMILIES = ("search/naive/ordered", "knn/direct", "bm3d/colour", "vbm3d/gray")


def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    problem = _build_backend_problem()
    if problem:
        pytest.skip(f"cannot build without isolation: {problem} "
                    "(pip install 'setuptools>=68' wheel; `make test` installs them)")

    # Build from a copy of the working tree, so no build/ or *.egg-info lands in the checkout.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=_NOT_COPIED, symlinks=True)
    wheelhouse = tmp_path / "wheelhouse"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", wheelhouse, source], cwd=tmp_path)
    wheels = list(wheelhouse.glob("clpatch-*.whl"))
    assert len(wheels) == 1, wheels

    # Everything the checkout has in cl_src/ and device_profiles/ is in the wheel.
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for folder, package, pattern in [("cl_src", "clpatch/cl_src", "**/*.mako"),
                                     ("device_profiles", "clpatch/device_profiles", "*.toml")]:
        for path in (REPO / folder).glob(pattern):
            relative = path.relative_to(REPO / folder).as_posix()
            assert f"{package}/{relative}" in names, f"{folder}/{relative} is not in the wheel"
    assert "clpatch/data/camera.png" in names
    for path in (REPO / "tests" / "reference").glob("*.py"):
        assert f"clpatch/oracles/{path.name}" in names, f"oracle {path.name} is not in the wheel"

    # A fresh venv that sees this environment's dependencies but not the checkout.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    env = _venv_env(tmp_path)
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        cwd=tmp_path, env=env).stdout.strip())
    (purelib / "clpatch_test_dependencies.pth").write_text(
        "".join(f"{folder}\n" for folder in dependency_path(tmp_path)))
    missing = _run([python, "-c", "import importlib.util as u; "
                    "print(u.find_spec('clpatch') is None)"], cwd=tmp_path, env=env)
    assert missing.stdout.strip() == "True", "clpatch is importable before the wheel is installed"

    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          wheels[0]], cwd=tmp_path, env=env)
    done = _run([python, "-c", CHECK], cwd=tmp_path, env=env)
    assert "installed clpatch ok" in done.stdout and "installed oracles ok" in done.stdout

    devices = _run([venv / "bin" / "clpatch", "devices"], cwd=tmp_path, env=env)
    assert "<- default" in devices.stdout

    selftest = _run([venv / "bin" / "clpatch", "selftest", "--json",
                     *(f"--family={name}" for name in SELFTEST_FAMILIES)], cwd=tmp_path, env=env)
    report = json.loads(selftest.stdout)
    assert report["passed"] is True, report
    assert [f["name"] for f in report["families"]] == list(SELFTEST_FAMILIES)
