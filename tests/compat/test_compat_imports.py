"""clpatch.compat uses only the package root's public names, and `import clpatch` does not
import it (users import clpatch.compat.skimage / clpatch.compat.bm3d themselves)."""

from __future__ import annotations

from tests.test_architecture import loaded_by_import_clpatch, root_only_offenders


def test_compat_imports_only_the_package_root():
    offenders = root_only_offenders("compat", 3)
    assert not offenders, "\n".join(offenders)


def test_import_clpatch_does_not_import_compat():
    assert loaded_by_import_clpatch("clpatch.compat") == []
