"""Rendering (a pure function whose errors show the parameters), build errors with their logs,
and the program cache in memory and on disk."""

import os
import tempfile

import numpy as np
import pyopencl as cl
import pytest

import clpatch
from clpatch.core import buildchild, kernels
from clpatch.core.kernels import ProgramCache, cache_dir, device_identity, max_group_size, render
from clpatch.core.profiles import family_profile

SEARCH = dict(variant="square", patch=8, n=16, channels=1, metric="l2", table="ordered",
              video=False, tile=16, batch=8)
# The disk-cache tests build the small conversion kernel, for a source type no search in the
# suite uses, so that they never wait for a search kernel to compile.
CONVERT = dict(src_type="short", group=4)
BAD_SOURCE = "__kernel void broken(__global float *x) { x[0] = not_declared_anywhere; }\n"


# ---- render ----------------------------------------------------------------------------------

def test_render_is_pure():
    profile = family_profile("nvidia")
    first = render("match/search.cl.mako", profile, **SEARCH)
    assert render("match/search.cl.mako", family_profile("nvidia"), **SEARCH) == first
    assert render("match/search.cl.mako", profile, **dict(reversed(list(SEARCH.items())))) == first
    assert "__kernel" in first and "search_square" in first


def test_render_depends_on_every_input():
    profile = family_profile("nvidia")
    base = render("match/search.cl.mako", profile, **SEARCH)
    others = [
        render("match/search.cl.mako", profile.with_overrides(bank_padding=2), **SEARCH),
        render("match/search.cl.mako", family_profile("amd"), **SEARCH),
        render("match/search.cl.mako", profile, **{**SEARCH, "n": 8}),
        render("match/search.cl.mako", profile, **{**SEARCH, "metric": "l1"}),
        render("match/search.cl.mako", profile, **{**SEARCH, "table": "unordered"}),
        render("match/search.cl.mako", profile, **{**SEARCH, "batch": 4}),
    ]
    assert len({base, *others}) == len(others) + 1


def test_render_header_names_template_parameters_and_profile():
    profile = family_profile("amd")
    source = render("match/search.cl.mako", profile, **SEARCH)
    lines = source.splitlines()
    assert lines[0] == "// clpatch: match/search.cl.mako"
    assert lines[1].startswith("// parameters: ")
    for name, value in SEARCH.items():
        assert f"{name}={value!r}" in lines[1]
    assert lines[2].startswith("// profile: amd: ")
    for name, value in profile.template_values().items():
        assert f"{name}={value!r}" in lines[2]


@pytest.mark.parametrize("params", [
    dict(variant="naive", patch=8, n=4, channels=1, metric="l2", table="ordered", video=False),
    dict(variant="rowband", patch=7, n=8, channels=3, metric="l1", table="unordered", video=True,
         step=3, width=64, rows=3, batch=4),
    dict(variant="square", patch=8, n=1, channels=2, metric="l2", table="unordered", video=True,
         tile=8, batch=1),
])
@pytest.mark.parametrize("family", ["nvidia", "amd", "intel", "cpu", "generic"])
def test_every_variant_renders_for_every_family_without_a_device(family, params):
    source = render("match/search.cl.mako", family_profile(family), **params)
    kernel = {"naive": "search_naive", "rowband": "search_rowband",
              "square": "search_square"}[params["variant"]]
    assert f"void {kernel}(" in source
    assert "${" not in source and "<%" not in source        # nothing left unrendered


@pytest.mark.parametrize("params,detail", [
    ({k: v for k, v in SEARCH.items() if k != "patch"}, "missing 1 required positional argument: 'patch'"),
    ({**SEARCH, "variant": "bogus"}, "unknown search variant 'bogus'"),
    ({**SEARCH, "metric": "l7"}, "metric must be 'l2' or 'l1'"),
    ({**SEARCH, "variant": "square", "patch": 7}, "AssertionError"),
])
def test_render_errors_name_the_template_and_parameters(params, detail):
    with pytest.raises(clpatch.KernelBuildError) as info:
        render("match/search.cl.mako", family_profile("cpu"), **params)
    message = str(info.value)
    assert "rendering match/search.cl.mako failed" in message
    assert "profile cpu" in message
    for name, value in params.items():
        assert f"{name}={value!r}" in message
    assert detail in message


def test_unknown_template():
    with pytest.raises(clpatch.KernelBuildError, match="rendering nothing.cl.mako failed"):
        render("nothing.cl.mako", family_profile("cpu"))


def test_kernel_build_error_is_a_clpatch_error():
    assert issubclass(clpatch.KernelBuildError, clpatch.ClpatchError)
    assert issubclass(clpatch.KernelBuildError, RuntimeError)


# ---- build errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("in_child", [True, False], ids=["in-child", "in-process"])
def test_build_error_holds_the_log_and_parameters(runtime, tmp_path, monkeypatch, in_child):
    """The same error whether the compiler ran in a build child (then the cause holds the
    log it handed back) or in this process (the cause is pyopencl's error)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(buildchild.ENV, "1" if in_child else "0")
    params = {"patch": 8, "variant": "made-up"}
    with pytest.raises(clpatch.KernelBuildError) as info:
        runtime.programs.build(BAD_SOURCE, template="broken.cl.mako", params=params)
    message = str(info.value)
    assert f"building broken.cl.mako for {runtime.device.name.strip()} failed" in message
    assert "patch=8" in message and "variant='made-up'" in message
    assert f"profile: {runtime.profile.family}" in message
    assert "not_declared_anywhere" in message                    # the compiler's own words
    assert "build log:" in message
    # The failing source is kept for reading.
    saved = message.split("source saved as: ")[1].splitlines()[0]
    assert saved.startswith(str(tmp_path))
    with open(saved) as fh:
        assert fh.read() == BAD_SOURCE
    cause = info.value.__cause__
    assert isinstance(cause, buildchild.CompileRefused if in_child else cl.Error)
    assert "not_declared_anywhere" in str(cause)


def test_failed_build_is_not_cached(runtime, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path / "cache"))
    programs = ProgramCache(runtime)
    for _ in range(2):
        with pytest.raises(clpatch.KernelBuildError):
            programs.build(BAD_SOURCE)
    assert programs.builds == 0
    assert not (tmp_path / "cache").exists()


# ---- memory and disk cache -------------------------------------------------------------------

def run_convert(runtime, program, limit=np.inf):
    """Launch the built conversion kernel: int16 (2, 3) -> planar float, and the peak
    |value| it folds into its check word (and the other word cleared); values above
    `limit` are stored as 0 (after the check has seen them)."""
    src = np.array([[1, -2, 3], [400, -500, 32767]], np.int16)
    mf = cl.mem_flags
    src_buf = cl.Buffer(runtime.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=src)
    dst_buf = cl.Buffer(runtime.context, mf.WRITE_ONLY, src.size * 4)
    peak = np.array([7, 0], np.uint32)       # word 1 is the run's; word 0 gets cleared
    peak_buf = cl.Buffer(runtime.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=peak)
    i64, i32 = np.int64, np.int32
    cl.Kernel(program, "to_planar")(runtime.queue, (4, 2, 1), (4, 1, 1), src_buf, i64(0), i64(0),
                                    i64(3), i64(1), i64(0), i32(1), i32(2), i32(3), i32(1), dst_buf,
                                    i64(0), peak_buf, i32(1), np.float32(limit))
    out = np.empty(src.shape, np.float32)
    cl.enqueue_copy(runtime.queue, out, dst_buf)
    cl.enqueue_copy(runtime.queue, peak, peak_buf)
    expected = src.astype(np.float32)
    np.testing.assert_array_equal(out, np.where(np.abs(expected) <= limit, expected, 0))
    assert peak.view(np.float32)[1] == 32767.0 and peak[0] == 0


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    return tmp_path / "programs"


def binaries(folder):
    return sorted(folder.glob("*.bin")) if folder.is_dir() else []


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "programs"
    monkeypatch.delenv("CLPATCH_CACHE_DIR")
    assert cache_dir() is not None and cache_dir().name == "programs"
    monkeypatch.setenv("CLPATCH_NO_DISK_CACHE", "0")
    assert cache_dir() is not None
    monkeypatch.setenv("CLPATCH_NO_DISK_CACHE", "1")
    assert cache_dir() is None


def test_memory_cache(runtime, cache_folder):
    programs = ProgramCache(runtime)
    first = programs.get("lib/convert.cl.mako", **CONVERT)
    assert programs.builds == 1
    assert programs.get("lib/convert.cl.mako", **CONVERT) is first
    assert programs.builds == 1
    other = programs.get("lib/convert.cl.mako", src_type="ushort", group=4)
    assert other is not first and programs.builds == 2
    run_convert(runtime, first)
    run_convert(runtime, first, limit=1000.0)    # 32767 is stored as 0, and still checked


def test_disk_cache_is_used_by_a_second_runtime(runtime, cache_folder):
    first = clpatch.Runtime(runtime.device)
    program = first.programs.get("lib/convert.cl.mako", **CONVERT)
    assert first.programs.builds == 1
    (stored,) = binaries(cache_folder)
    assert stored.stat().st_size > 0
    run_convert(first, program)

    second = clpatch.Runtime(runtime.device)
    loaded = second.programs.get("lib/convert.cl.mako", **CONVERT)
    assert second.programs.builds == 0
    assert binaries(cache_folder) == [stored]
    run_convert(second, loaded)


def test_a_pocl_binary_without_its_bitcode_is_rebuilt_not_loaded(runtime, cache_folder):
    """PoCL aborts the process loading a binary without its program.bc (seen once in CI):
    such a cached file, checksum intact, must be rebuilt from source instead."""
    if "portable computing language" not in runtime.device.platform.name.lower():
        pytest.skip("a PoCL binary layout")
    first = clpatch.Runtime(runtime.device)
    first.programs.get("lib/convert.cl.mako", **CONVERT)
    (stored,) = binaries(cache_folder)
    binary = kernels._unpack_binary(stored.read_bytes())
    assert binary is not None and b"program.bc" in binary
    stored.write_bytes(kernels._pack_binary(binary.replace(b"program.bc", b"program.xx")))
    second = clpatch.Runtime(runtime.device)
    program = second.programs.get("lib/convert.cl.mako", **CONVERT)
    assert second.programs.builds == 1
    run_convert(second, program)


def test_disk_cache_key_includes_options_and_profile(runtime, cache_folder):
    programs = ProgramCache(runtime)
    source = render("lib/convert.cl.mako", runtime.profile, **CONVERT)
    programs.build(source)
    programs.build(source, options=("-DUNUSED_MACRO=1",))
    assert programs.builds == 2 and len(binaries(cache_folder)) == 2
    other = clpatch.Runtime(runtime.device, profile_overrides={"bank_padding": 3})
    other.programs.get("lib/convert.cl.mako", **CONVERT)
    assert other.programs.builds == 1 and len(binaries(cache_folder)) == 3


def _truncate(data):
    return data[: len(data) // 2]


def _flip_last_byte(data):
    return data[:-1] + bytes([data[-1] ^ 0xFF])


@pytest.mark.parametrize("damage", [
    lambda data: b"",
    lambda data: b"not a program binary at all" * 100,
    _truncate,
    _flip_last_byte,
    lambda data: data[-len(data) // 2:],
], ids=["empty", "garbage", "truncated", "flipped-byte", "headless"])
def test_damaged_binary_is_rebuilt(runtime, cache_folder, damage):
    clpatch.Runtime(runtime.device).programs.get("lib/convert.cl.mako", **CONVERT)
    (stored,) = binaries(cache_folder)
    good = stored.read_bytes()
    stored.write_bytes(damage(good))

    rt = clpatch.Runtime(runtime.device)
    program = rt.programs.get("lib/convert.cl.mako", **CONVERT)
    assert rt.programs.builds == 1
    run_convert(rt, program)
    # The damaged file was replaced by a good one, which the next process loads.
    assert binaries(cache_folder) == [stored] and stored.read_bytes() != damage(good)
    again = clpatch.Runtime(runtime.device)
    run_convert(again, again.programs.get("lib/convert.cl.mako", **CONVERT))
    assert again.programs.builds == 0


def test_foreign_binary_with_a_valid_envelope_is_rebuilt(runtime, cache_folder):
    """A binary that is intact but not a program for this device (e.g. copied from another
    machine under the same name) is rejected by the driver and rebuilt."""
    from clpatch.core import kernels

    clpatch.Runtime(runtime.device).programs.get("lib/convert.cl.mako", **CONVERT)
    (stored,) = binaries(cache_folder)
    stored.write_bytes(kernels._pack_binary(b"\x7fELF" + bytes(range(256)) * 4))
    rt = clpatch.Runtime(runtime.device)
    run_convert(rt, rt.programs.get("lib/convert.cl.mako", **CONVERT))
    assert rt.programs.builds == 1


def test_no_disk_cache(runtime, cache_folder, monkeypatch):
    monkeypatch.setenv("CLPATCH_NO_DISK_CACHE", "1")
    rt = clpatch.Runtime(runtime.device)
    rt.programs.get("lib/convert.cl.mako", **CONVERT)
    assert rt.programs.builds == 1
    assert not cache_folder.exists()
    rt2 = clpatch.Runtime(runtime.device)
    rt2.programs.get("lib/convert.cl.mako", **CONVERT)
    assert rt2.programs.builds == 1                     # built again: nothing was kept


def test_unwritable_cache_folder_does_not_stop_the_work(runtime, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(blocker))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    rt = clpatch.Runtime(runtime.device)
    run_convert(rt, rt.programs.get("lib/convert.cl.mako", **CONVERT))
    assert rt.programs.builds == 1


def test_device_identity_names_the_driver(runtime):
    identity = device_identity(runtime.device)
    for part in (runtime.device.name, runtime.device.driver_version, runtime.device.platform.version):
        assert part.strip() in identity


def test_max_group_size(runtime):
    program = runtime.programs.get("lib/convert.cl.mako", src_type="float", group=64)
    kernel = cl.Kernel(program, "to_planar")
    size = max_group_size(kernel, runtime.device)
    assert 1 <= size <= runtime.device.max_work_group_size


def test_simulator_programs_are_never_cached_on_disk(runtime, cache_folder, monkeypatch):
    monkeypatch.setattr(type(runtime), "is_simulator", property(lambda self: True))
    rt = clpatch.Runtime(runtime.device)
    rt.programs.get("lib/convert.cl.mako", **CONVERT)
    assert rt.programs.builds == 1 and not cache_folder.exists()


def test_cache_files_are_written_atomically(runtime, cache_folder):
    clpatch.Runtime(runtime.device).programs.get("lib/convert.cl.mako", **CONVERT)
    assert [p.suffix for p in cache_folder.iterdir()] == [".bin"]     # no temporary left behind
    assert os.access(binaries(cache_folder)[0], os.R_OK)
