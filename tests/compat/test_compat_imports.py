"""clpatch.compat uses only the package root's public names, and `import clpatch` does not
import it (users import clpatch.compat.skimage / clpatch.compat.bm3d themselves)."""

from __future__ import annotations

import subprocess
import sys

from tests.test_architecture import root_only_offenders


def test_compat_imports_only_the_package_root():
    offenders = root_only_offenders("compat", 3)
    assert not offenders, "\n".join(offenders)


def test_import_clpatch_does_not_import_compat():
    code = ("import sys, clpatch; "
            "print(sorted(m for m in sys.modules if m.startswith('clpatch.compat')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
