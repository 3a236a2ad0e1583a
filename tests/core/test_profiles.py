"""Device profiles: the family files, provenance of every value, device facts, overrides, and
the promise that profile values change performance, never results (every family's kernels
are run on the test device and checked against the oracle)."""

import dataclasses
from types import SimpleNamespace

import pyopencl as cl
import pytest

import clpatch
from clpatch.core.profiles import (
    _VALUE_FIELDS,
    FAMILIES,
    NEIGHBOUR_TABLES,
    ORIGINS,
    SUBGROUP_OPS,
    family_for_device,
    family_profile,
    measured_facts,
    profile_for_device,
)
from clpatch.core.resources import profiles_dir
from clpatch.match.window.config import SearchRequest, choose_search
from tests.helpers import check_search, random_image, tiered

FILE_ORIGINS = ("spec", "benchmark", "assumed")     # what a family file may state
INT_FIELDS = ("warp_size", "bank_padding", "naive_group_size", "rowband_width", "square_tile",
              "search_batch", "max_work_group_size", "local_mem_size", "compute_units",
              "global_mem_size", "max_mem_alloc_size")
BOOL_FIELDS = ("local_mem_fast", "int64_atomics", "float_atomics", "fp64")
DEVICE_FACTS = ("max_work_group_size", "local_mem_size", "local_mem_fast", "compute_units",
                "global_mem_size", "max_mem_alloc_size", "int64_atomics", "float_atomics", "fp64",
                "subgroup_ops")


# ---- family files ----------------------------------------------------------------------------

def test_value_fields_are_known():
    assert set(_VALUE_FIELDS) == set(INT_FIELDS) | set(BOOL_FIELDS) | {"neighbour_table", "subgroup_ops"}
    assert FILE_ORIGINS == ORIGINS[:3]


def test_one_file_per_family():
    assert sorted(path.stem for path in profiles_dir().glob("*.toml")) == sorted(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_file_loads_with_a_source_for_every_value(family):
    profile = family_profile(family)
    assert profile.family == family and profile.device_name == f"<{family} profile>"
    assert set(profile.origins) == set(_VALUE_FIELDS)
    for name, value, origin in profile.describe():
        assert origin in FILE_ORIGINS, (family, name, origin)
        assert profile.origin(name) == origin
        if name in BOOL_FIELDS:
            assert isinstance(value, bool), (family, name, value)
        elif name in INT_FIELDS:
            assert isinstance(value, int) and not isinstance(value, bool) and value >= 1
    assert profile.neighbour_table in NEIGHBOUR_TABLES and profile.subgroup_ops in SUBGROUP_OPS
    assert all(isinstance(v, str) and v for v in profile.notes.values())
    assert set(profile.notes) <= set(_VALUE_FIELDS)
    assert family_profile(family, device_name="X").device_name == "X"


def test_family_values_follow_the_papers():
    """Davy–Ehret §4.4.2 bank padding and §4.1.1 table kinds, as DESIGN.md states them."""
    assert {f: family_profile(f).bank_padding for f in ("nvidia", "amd", "intel")} == \
        {"nvidia": 1, "amd": 2, "intel": 4}
    assert family_profile("nvidia").neighbour_table == "ordered"
    assert family_profile("amd").neighbour_table == "unordered"
    assert family_profile("intel").neighbour_table == "unordered"
    assert family_profile("nvidia").warp_size == 32 and family_profile("amd").warp_size == 64


def test_unknown_family_is_rejected():
    with pytest.raises(ValueError, match="profile family must be one of"):
        family_profile("apple")


def test_profiles_are_frozen_and_hashable():
    profile = family_profile("cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.warp_size = 4
    with pytest.raises(TypeError):
        profile.origins["warp_size"] = "override"       # read-only mapping
    assert profile == family_profile("cpu") and hash(profile) == hash(family_profile("cpu"))
    assert profile.template_values() == {name: getattr(profile, name) for name in _VALUE_FIELDS}


# ---- overrides and validation ----------------------------------------------------------------

def test_overrides_are_marked():
    base = family_profile("generic")
    profile = base.with_overrides(neighbour_table="ordered", square_tile=4)
    assert (profile.neighbour_table, profile.square_tile) == ("ordered", 4)
    assert profile.origin("neighbour_table") == "override" and profile.origin("square_tile") == "override"
    assert profile.origin("warp_size") == base.origin("warp_size")
    assert base.square_tile == 8 and base.origin("square_tile") != "override"   # base untouched
    assert profile.notes == base.notes


def test_unknown_override_is_a_type_error():
    with pytest.raises(TypeError, match=r"unknown profile field\(s\) \['warp'\]"):
        family_profile("cpu").with_overrides(warp=32)
    with pytest.raises(TypeError, match="unknown profile field"):
        family_profile("cpu").with_overrides(family="nvidia")


@pytest.mark.parametrize("field,value", [
    ("warp_size", 0), ("bank_padding", -1), ("square_tile", 2.5), ("search_batch", True),
    ("max_mem_alloc_size", "1GB"), ("local_mem_size", None),
    ("neighbour_table", "sorted"), ("subgroup_ops", "cuda"),
    ("fp64", "no"), ("int64_atomics", 1), ("local_mem_fast", None),
])
def test_invalid_values_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        family_profile("cpu").with_overrides(**{field: value})


def test_invalid_family_is_rejected():
    with pytest.raises(ValueError, match="family must be one of"):
        dataclasses.replace(family_profile("cpu"), family="apple")


# ---- the test device -------------------------------------------------------------------------

def test_device_facts_are_measured(runtime):
    profile = runtime.profile
    device = runtime.device
    facts = measured_facts(device)
    for name in DEVICE_FACTS:
        assert profile.origin(name) == "measured", name
    for name, value in facts.items():
        assert getattr(profile, name) == value
        assert profile.origin(name) == "measured"
    assert profile.max_work_group_size == device.max_work_group_size
    assert profile.local_mem_size == device.local_mem_size
    assert profile.compute_units == device.max_compute_units
    assert profile.global_mem_size == device.global_mem_size
    assert profile.max_mem_alloc_size == device.max_mem_alloc_size
    assert profile.device_name == device.name.strip()
    assert profile.family == family_for_device(device)
    # Values the device does not report keep their file's provenance.
    assert profile.origin("bank_padding") in FILE_ORIGINS
    # Work-group preferences never exceed what the device accepts.
    assert profile.naive_group_size <= profile.max_work_group_size
    assert profile.rowband_width <= profile.max_work_group_size
    assert profile.square_tile ** 2 <= max(64, profile.max_work_group_size)


@pytest.mark.parametrize("family", FAMILIES)
def test_forced_family_keeps_device_facts(runtime, family):
    profile = profile_for_device(runtime.device, family=family)
    own = runtime.profile
    assert profile.family == family
    base = family_profile(family)
    for name in DEVICE_FACTS:
        if name != "subgroup_ops":
            assert getattr(profile, name) == getattr(own, name), name
        assert profile.origin(name) == "measured"
    # Sub-group operations may follow the forced family's preference, among those the
    # device really has.
    extensions = set(runtime.device.extensions.split())
    needs = {"none": True, "khr": "cl_khr_subgroups" in extensions,
             "intel": "cl_intel_subgroups" in extensions,
             "ptx": family_for_device(runtime.device) == "nvidia"}
    assert needs[profile.subgroup_ops], profile.subgroup_ops
    for name in ("bank_padding", "neighbour_table", "search_batch"):
        assert getattr(profile, name) == getattr(base, name)
        assert profile.origin(name) == base.origin(name)


def test_profile_for_device_applies_overrides_last(runtime):
    profile = profile_for_device(runtime.device, family="amd",
                                 overrides={"neighbour_table": "ordered", "local_mem_size": 8192})
    assert profile.neighbour_table == "ordered" and profile.local_mem_size == 8192
    assert profile.origin("local_mem_size") == "override"
    assert profile.origin("compute_units") == "measured"


def test_work_group_preferences_are_clamped_to_the_device():
    device = fake_device("Foo", cl.device_type.GPU, max_work_group_size=32)
    profile = profile_for_device(device, family="nvidia")
    assert profile.max_work_group_size == 32
    assert profile.naive_group_size == 32 and profile.rowband_width == 32
    assert profile.square_tile == 8
    assert {profile.origin(n) for n in ("naive_group_size", "rowband_width", "square_tile")} == {"measured"}


def fake_device(vendor, kind, *, platform="Foo Platform", platform_vendor="Foo Inc.",
                max_work_group_size=256, extensions=""):
    return SimpleNamespace(
        name=f" {vendor} device ", vendor=vendor, type=kind, extensions=extensions,
        platform=SimpleNamespace(name=platform, vendor=platform_vendor),
        max_work_group_size=max_work_group_size, local_mem_size=65536,
        local_mem_type=cl.device_local_mem_type.LOCAL, max_compute_units=10,
        global_mem_size=1 << 32, max_mem_alloc_size=1 << 30, double_fp_config=0)


@pytest.mark.parametrize("vendor,kind,platform,expected", [
    ("NVIDIA Corporation", cl.device_type.GPU, "NVIDIA CUDA", "nvidia"),
    ("Advanced Micro Devices, Inc.", cl.device_type.GPU, "AMD Accelerated Parallel Processing", "amd"),
    ("AMD", cl.device_type.GPU, "rusticl", "amd"),
    ("Intel(R) Corporation", cl.device_type.GPU, "Intel(R) OpenCL Graphics", "intel"),
    ("Intel(R) Corporation", cl.device_type.CPU, "Intel(R) OpenCL", "cpu"),
    ("AuthenticAMD", cl.device_type.CPU, "Portable Computing Language", "cpu"),
    ("Intel(R) Corporation", cl.device_type.ACCELERATOR, "Intel(R) FPGA", "generic"),
    ("Apple", cl.device_type.GPU, "Apple", "generic"),
    ("Mali", cl.device_type.GPU, "ARM Platform", "generic"),
])
def test_family_for_device(vendor, kind, platform, expected):
    assert family_for_device(fake_device(vendor, kind, platform=platform)) == expected


@pytest.mark.parametrize("actual,extensions,forced,expected", [
    ("NVIDIA Corporation", "", None, "ptx"),
    ("NVIDIA Corporation", "cl_khr_subgroups", "intel", "ptx"),
    ("Intel(R) Corporation", "cl_intel_subgroups cl_khr_subgroups", None, "intel"),
    ("Intel(R) Corporation", "cl_khr_subgroups", None, "khr"),
    ("Advanced Micro Devices, Inc.", "cl_khr_subgroups", "nvidia", "khr"),
    ("Advanced Micro Devices, Inc.", "", "nvidia", "none"),
    ("Apple", "cl_intel_subgroups", None, "intel"),
])
def test_subgroup_ops_follow_the_real_device(actual, extensions, forced, expected):
    """A forced profile never asks for sub-group operations the device lacks."""
    device = fake_device(actual, cl.device_type.GPU, extensions=extensions)
    profile = profile_for_device(device, family=forced)
    assert profile.subgroup_ops == expected and profile.origin("subgroup_ops") == "measured"


# ---- every family's kernels on the test device -----------------------------------------------

_forced: dict = {}


def forced_runtime(runtime, family=None, **overrides):
    """A runtime on the test device with `family`'s profile (one per family and device)."""
    key = (runtime.device.int_ptr, family, tuple(sorted(overrides.items())))
    if key not in _forced:
        _forced[key] = clpatch.Runtime(runtime.device, profile=family,
                                       profile_overrides=overrides or None)
    return _forced[key]


# (patch, step, window, k, variant) -> expected variant: the rule's three choices and naive.
REQUESTS = {
    "square": (8, 4, 21, 16, None),
    "convolution": (2, 1, 5, 4, None),
    "column": (7, 3, 21, 8, None),
    "naive": (8, 4, 21, 16, "naive"),
}


# CI: each family with two of the variants, each variant with two or three families;
# make test-slow: every pair.
@pytest.mark.parametrize("family,variant", tiered(
    ((f, v) for f in FAMILIES for v in REQUESTS),
    keep=lambda f, v: (FAMILIES.index(f) + list(REQUESTS).index(v)) % 2 == 0))
def test_every_family_gives_correct_results(runtime, family, variant):
    rt = forced_runtime(runtime, family)
    assert rt.profile.family == family and rt.device == runtime.device
    patch, step, window, k, forced = REQUESTS[variant]
    image = random_image((37, 53), seed=41)
    result = clpatch.search_patches(image, patch, step, window, k, variant=forced, runtime=rt)
    assert result.config.variant == variant
    assert result.config.table == rt.profile.neighbour_table
    check_search(result, image, patch_size=patch, step=step, window=window, k=k)
    # The family's own values were used (unless the built kernel made the plan shrink them).
    expected = choose_search(SearchRequest(patch, step, k, window), rt.profile, forced,
                             size=image.shape[:2])
    if "shrunk" not in result.config.reason:
        assert result.config == expected


@pytest.mark.parametrize("overrides,variant", [
    ({"square_tile": 2, "search_batch": 1}, "square"),
    ({"rowband_width": 8, "search_batch": 1}, "column"),
    ({"rowband_width": 9, "search_batch": 3}, "convolution"),
    ({"max_work_group_size": 64, "local_mem_size": 4096}, "column"),
    ({"naive_group_size": 1}, "naive"),
], ids=["tile2", "band8", "band9-batch3", "small-device", "naive-group1"])
def test_extreme_profile_values_give_correct_results(runtime, overrides, variant):
    """Profile values only change performance: even degenerate work-group shapes and batches
    give the oracle's result."""
    rt = forced_runtime(runtime, None, **overrides)
    patch, step, window, k, _ = REQUESTS[variant]
    image = random_image((37, 53), seed=42)
    result = clpatch.search_patches(image, patch, step, window, k, variant=variant, runtime=rt)
    assert result.config.variant == variant
    check_search(result, image, patch_size=patch, step=step, window=window, k=k)


def test_profile_env_variable_forces_a_family(runtime, monkeypatch):
    monkeypatch.setenv("CLPATCH_PROFILE", "amd")
    rt = clpatch.Runtime(runtime.device)
    assert rt.profile.family == "amd"
    assert rt.profile.bank_padding == 2
    assert rt.profile.origin("max_work_group_size") == "measured"
    monkeypatch.setenv("CLPATCH_PROFILE", "nvidia")
    assert clpatch.Runtime(runtime.device, profile="intel").profile.family == "intel"   # argument wins
    monkeypatch.setenv("CLPATCH_PROFILE", "bogus")
    with pytest.raises(ValueError, match="profile must be one of"):
        clpatch.Runtime(runtime.device)


def test_runtime_takes_a_profile_object(runtime):
    profile = family_profile("generic", device_name="mine")
    rt = clpatch.Runtime(runtime.device, profile=profile)
    assert rt.profile is profile
    rt = clpatch.Runtime(runtime.device, profile=profile, profile_overrides={"search_batch": 2})
    assert rt.profile.search_batch == 2 and rt.profile.origin("search_batch") == "override"
    assert rt.profile.device_name == "mine"
    with pytest.raises(TypeError, match="unknown profile field"):
        clpatch.Runtime(runtime.device, profile_overrides={"bogus": 1})


@pytest.mark.parametrize("size,units,tile", [
    ((512, 512), 132, 8),       # 81 groups with 16 < 264; 361 with 8
    ((256, 256), 132, 4),       # 81 groups with 8; 441 with 4
    ((1024, 1024), 132, 16),    # 289 groups with 16
    ((2048, 2048), 132, 16),
    ((512, 512), 2, 16),        # a CPU's two units: the profile's tile
    ((32, 40), 132, 4),         # never below MIN_SQUARE_TILE
])
def test_the_square_tile_fits_the_image(runtime, size, units, tile):
    """The rules shrink the square search's tile on a small image until it gives
    GROUPS_PER_UNIT work-groups per compute unit (H100 measurements in window_config)."""
    profile = dataclasses.replace(runtime.profile, square_tile=16, compute_units=units,
                                  max_work_group_size=max(256, runtime.profile.max_work_group_size),
                                  local_mem_size=max(48 * 1024, runtime.profile.local_mem_size))
    request = SearchRequest(8, 4, 16, 21)
    config = choose_search(request, profile, None, size=size)
    assert config.variant == "square" and config.tile == tile
    assert choose_search(request, profile, None).tile == 16          # no size: the profile's
    forced = choose_search(request, profile, clpatch.SearchConfig("square"), size=size)
    assert forced.tile == 16                                          # a forced variant: as given
