"""clpatch.compat uses only the package root's public names, and `import clpatch` does not
import it (users import clpatch.compat.skimage / clpatch.compat.bm3d themselves)."""

from __future__ import annotations

import subprocess
import sys

from tests.test_architecture import PACKAGE, PACKAGE_DIR, import_graph


def test_compat_imports_only_the_package_root():
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    compat = [m for m in graph.modules if m.startswith(f"{PACKAGE}.compat")]
    assert len(compat) >= 3, compat
    offenders = [f"{imp.where}: `{imp.statement}`" for imp in graph.imports
                 if imp.importer in compat and imp.target != PACKAGE
                 and not imp.target.startswith(f"{PACKAGE}.compat")]
    offenders += [f"{imp.where}: private name `{imp.name}`" for imp in graph.imports
                  if imp.importer in compat and imp.name and imp.name.startswith("_")]
    assert not offenders, "\n".join(offenders)


def test_import_clpatch_does_not_import_compat():
    code = ("import sys, clpatch; "
            "print(sorted(m for m in sys.modules if m.startswith('clpatch.compat')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
