"""Device profiles: what the kernels are specialised for.

A `DeviceProfile` is built in three layers, later layers winning:

1. the family file in `device_profiles/` (`nvidia`, `amd`, `intel`, `cpu`, `generic`);
2. facts the OpenCL device reports about itself (memory sizes, limits, extensions);
3. overrides given by the user (or a test forcing a family's values).

Every value remembers where it came from (`spec`, `benchmark`, `assumed`, `measured`,
`override`),
so `clpatch devices` can say why a kernel was specialised the way it was.

This is the only module that looks at vendor names.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

from .resources import profiles_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

FAMILIES = ("nvidia", "amd", "intel", "cpu", "generic")
NEIGHBOUR_TABLES = ("ordered", "unordered")
SUBGROUP_OPS = ("none", "khr", "intel", "ptx")
# spec: vendor documentation or the papers; benchmark: measured by clpatch's benchmarks on a
# device of the family (benchmarks/results/); assumed: a guess; measured: reported by the
# device at run time; override: given by the user.
ORIGINS = ("spec", "benchmark", "assumed", "measured", "override")


@dataclass(frozen=True)
class DeviceProfile:
    """Everything kernel templates may depend on, for one device (or one family).

    Values only change how fast kernels run, never their results.
    """

    family: str
    device_name: str
    warp_size: int
    bank_padding: int
    neighbour_table: str
    naive_group_size: int
    rowband_width: int
    square_tile: int
    search_batch: int
    subgroup_ops: str
    max_work_group_size: int
    local_mem_size: int
    local_mem_fast: bool
    compute_units: int
    global_mem_size: int
    max_mem_alloc_size: int
    int64_atomics: bool
    float_atomics: bool
    fp64: bool
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    notes: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        if self.neighbour_table not in NEIGHBOUR_TABLES:
            raise ValueError(
                f"neighbour_table must be one of {NEIGHBOUR_TABLES}, got {self.neighbour_table!r}"
            )
        if self.subgroup_ops not in SUBGROUP_OPS:
            raise ValueError(f"subgroup_ops must be one of {SUBGROUP_OPS}, got {self.subgroup_ops!r}")
        for name in ("warp_size", "bank_padding", "naive_group_size", "rowband_width",
                     "square_tile", "search_batch", "max_work_group_size", "local_mem_size", "compute_units",
                     "global_mem_size", "max_mem_alloc_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("local_mem_fast", "int64_atomics", "float_atomics", "fp64"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        object.__setattr__(self, "origins", MappingProxyType(dict(self.origins)))
        object.__setattr__(self, "notes", MappingProxyType(dict(self.notes)))

    def origin(self, name: str) -> str:
        """Where the value of field `name` came from: spec, assumed, measured or override."""
        return self.origins.get(name, "assumed")

    def with_overrides(self, **values: Any) -> DeviceProfile:
        """A copy with some values replaced; those values are marked `override`."""
        unknown = set(values) - set(_VALUE_FIELDS)
        if unknown:
            raise TypeError(f"unknown profile field(s) {sorted(unknown)}; known: {_VALUE_FIELDS}")
        origins = dict(self.origins)
        origins.update(dict.fromkeys(values, "override"))
        return dataclasses.replace(self, origins=origins, **values)

    def template_values(self) -> dict[str, Any]:
        """The values a kernel template may read (no provenance, no names)."""
        return {name: getattr(self, name) for name in _VALUE_FIELDS}

    def describe(self) -> list[tuple[str, Any, str]]:
        """(field, value, origin) rows for display."""
        return [(name, getattr(self, name), self.origin(name)) for name in _VALUE_FIELDS]


_VALUE_FIELDS = tuple(
    f.name for f in dataclasses.fields(DeviceProfile)
    if f.name not in ("family", "device_name", "origins", "notes")
)


@cache
def _family_file(family: str) -> dict[str, Any]:
    if family not in FAMILIES:
        raise ValueError(f"profile family must be one of {FAMILIES}, got {family!r}")
    path = profiles_dir() / f"{family}.toml"
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    values = data.get("values", {})
    missing = set(_VALUE_FIELDS) - set(values)
    if missing:
        raise ValueError(f"device profile {path} lacks values for {sorted(missing)}")
    return values


def family_profile(family: str, device_name: str | None = None) -> DeviceProfile:
    """The profile of a family as its file states it, with no device facts applied."""
    if not isinstance(family, str):
        raise TypeError(f"family must be a string, one of {FAMILIES}, got {family!r}")
    entries = _family_file(family)
    kwargs = {name: entries[name]["value"] for name in _VALUE_FIELDS}
    origins = {name: entries[name].get("source", "assumed") for name in _VALUE_FIELDS}
    bad = {name: origin for name, origin in origins.items() if origin not in ORIGINS[:3]}
    if bad:
        raise ValueError(f"device profile {family}: sources must be one of {ORIGINS[:3]}, got {bad}")
    notes = {name: entries[name]["note"] for name in _VALUE_FIELDS if "note" in entries[name]}
    return DeviceProfile(family=family, device_name=device_name or f"<{family} profile>",
                         origins=origins, notes=notes, **kwargs)


def family_for_device(device: Any) -> str:
    """Which profile family an OpenCL device belongs to (vendor names are read here only)."""
    import pyopencl as cl

    if device.type & cl.device_type.CPU:
        return "cpu"
    vendor = f"{device.vendor} {device.platform.vendor} {device.platform.name}".lower()
    if "nvidia" in vendor:
        return "nvidia"
    if "advanced micro devices" in vendor or "amd" in vendor.split():
        return "amd"
    if "intel" in vendor and device.type & cl.device_type.GPU:
        return "intel"
    return "generic"


def measured_facts(device: Any) -> dict[str, Any]:
    """Facts an OpenCL device reports about itself, in profile field names."""
    import pyopencl as cl

    extensions = set(device.extensions.split())
    facts: dict[str, Any] = {
        "max_work_group_size": int(device.max_work_group_size),
        "local_mem_size": int(device.local_mem_size),
        "local_mem_fast": device.local_mem_type == cl.device_local_mem_type.LOCAL,
        "compute_units": int(device.max_compute_units),
        "global_mem_size": int(device.global_mem_size),
        "max_mem_alloc_size": int(device.max_mem_alloc_size),
        "int64_atomics": "cl_khr_int64_base_atomics" in extensions,
        "float_atomics": "cl_ext_float_atomics" in extensions,
        "fp64": "cl_khr_fp64" in extensions or bool(getattr(device, "double_fp_config", 0)),
    }
    for attribute in ("warp_size_nv", "wavefront_width_amd"):
        try:
            width = int(getattr(device, attribute))
        except (cl.Error, AttributeError, TypeError, ValueError):
            continue
        if width > 0:
            facts["warp_size"] = width
            break
    return facts


def _subgroup_ops_for(actual_family: str, extensions: set[str], preferred: str) -> str:
    # Decided by what the device really is, even when another family's profile is forced:
    # a forced profile may change performance, never whether the kernels run.
    if actual_family == "nvidia":
        return "ptx"
    if preferred == "intel" and "cl_intel_subgroups" in extensions:
        return "intel"
    if "cl_khr_subgroups" in extensions:
        return "khr"
    if "cl_intel_subgroups" in extensions:
        return "intel"
    return "none"


def profile_for_device(device: Any, family: str | None = None,
                       overrides: Mapping[str, Any] | None = None) -> DeviceProfile:
    """The profile of `device`: its family file, overlaid with what the device reports,
    overlaid with `overrides`. `family` forces a family's file (for testing portability)."""
    actual = family_for_device(device)
    base = family_profile(family or actual, device_name=device.name.strip())
    facts = measured_facts(device)
    facts["subgroup_ops"] = _subgroup_ops_for(actual, set(device.extensions.split()),
                                              base.subgroup_ops)
    origins = dict(base.origins)
    origins.update(dict.fromkeys(facts, "measured"))
    profile = dataclasses.replace(base, origins=origins, **facts)
    # Work-group preferences never exceed what the device accepts.
    clamp = {name: min(getattr(profile, name), profile.max_work_group_size)
             for name in ("naive_group_size", "rowband_width")
             if getattr(profile, name) > profile.max_work_group_size}
    if profile.square_tile ** 2 > profile.max_work_group_size:
        clamp["square_tile"] = 8
    if clamp:
        origins.update(dict.fromkeys(clamp, "measured"))
        profile = dataclasses.replace(profile, origins=origins, **clamp)
    if overrides:
        profile = profile.with_overrides(**overrides)
    return profile
