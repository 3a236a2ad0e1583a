"""The API reference's reST, generated from a module's `__all__`, so a new public name cannot
be left out of the documentation: every name is put in the group its kind says (the groups
below only order the page; a name none of them lists lands in "Other names").

Pure Python (no Sphinx import): `clpatch_docs.py` parses these lines inside the page, and
tests/test_docs_site.py checks that every name of `clpatch.__all__` and of the compat modules
is in them.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

#: (title, names) in the order of the page; the rest of `__all__` goes to "Other names".
GROUPS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "clpatch": (
        ("Denoising", ("nlmeans", "nlmeans_video", "bm3d", "vbm3d", "burst_denoise",
                       "estimate_sigma")),
        ("Patch search", ("search_patches", "knn", "knn_vectors", "ann_search", "nnf",
                          "nnf_model", "reconstruct", "grid_positions")),
        ("Results", ("Matches", "SearchResult", "KnnVectors", "NnfModel")),
        ("Plans and pipelines", ("make_plan", "NLMeansPlan", "BM3DPlan", "VBM3DPlan",
                                 "SearchPlan", "SearchConfig")),
        ("Devices and runtimes", ("Runtime", "default_runtime", "list_devices", "select_device",
                                  "DeviceProfile", "family_profile")),
        ("Tuning and first run", ("explain", "warmup", "WarmupReport")),
        ("Errors", ("ClpatchError", "NoOpenCLError", "DeviceNotFoundError",
                    "DeviceResourceError", "KernelBuildError", "Cancelled")),
        ("Version", ("__version__",)),
    ),
}


def public_names(module: Any) -> list[str]:
    """The names a module exports: its `__all__`."""
    return list(module.__all__)


def groups(module_name: str) -> list[tuple[str, list[str]]]:
    """[(title, names)] covering every name of the module's `__all__` exactly once, in the
    order of GROUPS (a module without groups: one untitled group in `__all__`'s order)."""
    names = public_names(importlib.import_module(module_name))
    layout = GROUPS.get(module_name)
    if layout is None:
        return [("", names)]
    out, seen = [], set()
    for title, members in layout:
        present = [n for n in members if n in names]
        seen.update(present)
        if present:
            out.append((title, present))
    rest = [n for n in names if n not in seen]
    if rest:
        out.append(("Other names", rest))
    return out


def _entry(module: Any, module_name: str, name: str, first_of: dict[int, str]) -> list[str]:
    obj = getattr(module, name)
    target = f"{module_name}.{name}"
    alias = first_of.get(id(obj))
    if alias is not None and alias != name and (inspect.isclass(obj) or callable(obj)):
        role = "class" if inspect.isclass(obj) else "func"
        return [f".. py:data:: {target}", "",
                f"   Another name of :py:{role}:`{module_name}.{alias}` (the same object).", ""]
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return [f".. autoexception:: {target}", "   :show-inheritance:", ""]
    if inspect.isclass(obj):
        return [f".. autoclass:: {target}", "   :members:", "   :show-inheritance:", ""]
    if callable(obj):
        return [f".. autofunction:: {target}", ""]
    return [f".. py:data:: {target}", f"   :value: {obj!r}", ""]


def api_lines(module_name: str, heading: str = "-") -> list[str]:
    """reST documenting every name of `module_name.__all__`: the module's docstring, then one
    section per group (underlined with `heading`) of autodoc directives."""
    module = importlib.import_module(module_name)
    first_of: dict[int, str] = {}
    for name in public_names(module):
        first_of.setdefault(id(getattr(module, name)), name)
    lines = [f".. automodule:: {module_name}", ""]
    for title, names in groups(module_name):
        if title:
            lines += [title, heading * len(title), ""]
        for name in names:
            lines += _entry(module, module_name, name, first_of)
    return lines
