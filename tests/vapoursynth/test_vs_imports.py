"""clpatch.vapoursynth uses only the package root's public names (as a user's script would),
and `import clpatch` does not import it. Runs without VapourSynth (it reads the source)."""

from __future__ import annotations

import subprocess
import sys

from tests.test_architecture import loaded_by_import_clpatch, root_only_offenders


def test_vapoursynth_imports_only_the_package_root():
    offenders = root_only_offenders("vapoursynth", 5)
    assert not offenders, "\n".join(offenders)


def test_import_clpatch_does_not_import_vapoursynth():
    assert loaded_by_import_clpatch("vapoursynth") == []


def test_missing_vapoursynth_names_the_extra():
    # A vapoursynth module that fails to import stands for a missing installation.
    code = ("import sys; sys.modules['vapoursynth'] = None\n"
            "try:\n    import clpatch.vapoursynth\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 'pip install "clpatch[vapoursynth]"' in out.stdout
