"""Device listing and selection, `Runtime` construction, and the ICD registration of vendor
drivers that containers lose (tested on a fake vendor folder: the process's real OpenCL
registry is never touched)."""

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core import runtime as rt_module
from clpatch.core.runtime import DeviceEntry, is_simulator, list_devices, select_device
from tests.helpers import random_image


def entry_of(device):
    (entry,) = [e for e in list_devices() if e.device == device]
    return entry


def pocl_entries():
    return [e for e in list_devices() if "portable computing language" in e.device.platform.name.lower()]


# ---- listing ---------------------------------------------------------------------------------

def test_list_devices():
    entries = list_devices()
    assert entries, "the tests need at least one OpenCL device"
    assert len({e.index for e in entries}) == len(entries)
    for e in entries:
        assert e.index == f"{e.platform_index}:{e.device_index}"
        assert isinstance(e.device, cl.Device)
        assert e.device.name.strip() in e.label and e.device.platform.name.strip() in e.label
        assert e.search_text == e.search_text.lower()
        problems = e.problems()
        assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)


def test_simulator_reports_itself():
    simulators = [e for e in list_devices() if is_simulator(e.device)]
    if not simulators:
        pytest.skip("no Oclgrind platform installed")
    for e in simulators:
        assert any(p.startswith("simulator") for p in e.problems())


def test_test_device_has_no_simulator_problem(runtime):
    assert not any(p.startswith("simulator") for p in entry_of(runtime.device).problems())


def fake_device(name, *, kind=cl.device_type.GPU, platform="Fake Platform", vendor="Fake Inc.",
                units=8, clock=1000, available=True, local_mem=65536, group=256):
    return SimpleNamespace(
        name=name, vendor=vendor, type=kind, available=available, compiler_available=available,
        max_compute_units=units, max_clock_frequency=clock, local_mem_size=local_mem,
        max_work_group_size=group, version="OpenCL 3.0", driver_version="1.0",
        platform=SimpleNamespace(name=platform, vendor=vendor, version="OpenCL 3.0 fake"))


def test_problems_of_a_poor_device():
    device = fake_device("Tiny", available=False, local_mem=4096, group=32)
    problems = DeviceEntry(0, 0, device).problems()
    assert "device reports itself unavailable" in problems
    assert "no OpenCL C compiler" in problems
    assert "small local memory (4096 bytes)" in problems
    assert "small work-groups (max 32)" in problems
    assert "no matching profile: generic (safe, untuned) kernels" in problems
    assert DeviceEntry(0, 0, fake_device("Fine", vendor="NVIDIA Corporation")).problems() == []


# ---- selection -------------------------------------------------------------------------------

def test_select_by_index(runtime):
    entry = entry_of(runtime.device)
    assert select_device(entry.index) == runtime.device
    assert select_device(f" {entry.platform_index} : {entry.device_index} ") == runtime.device


def test_select_by_device_object(runtime):
    assert select_device(runtime.device) is runtime.device


def test_select_by_name_substring(runtime):
    name = runtime.device.name.strip()
    for spec in (name, name.upper(), name.lower()[1:-1]):
        chosen = select_device(spec)
        assert spec.lower() in entry_of(chosen).search_text


@pytest.mark.parametrize("spec", ["pocl", "POCL", "portable", "Portable Computing"])
def test_select_pocl_by_name(spec):
    if not pocl_entries():
        pytest.skip("no PoCL platform installed")
    device = select_device(spec)
    assert "portable computing language" in device.platform.name.lower()


def test_select_from_environment(runtime, monkeypatch):
    monkeypatch.setenv("CLPATCH_DEVICE", entry_of(runtime.device).index)
    assert select_device() == runtime.device
    assert clpatch.Runtime().device == runtime.device
    monkeypatch.setenv("CLPATCH_DEVICE", "no-such-device-anywhere")
    with pytest.raises(clpatch.DeviceNotFoundError):
        select_device()
    # An explicit argument wins over the environment.
    assert select_device(entry_of(runtime.device).index) == runtime.device


@pytest.mark.parametrize("spec", ["no-such-device-anywhere", "99:0", "0:99"])
def test_unknown_device_lists_the_devices(spec):
    with pytest.raises(clpatch.DeviceNotFoundError) as info:
        select_device(spec)
    message = str(info.value)
    assert repr(spec) in message
    for e in list_devices():
        assert f"{e.index}  {e.label}" in message
    assert isinstance(info.value, LookupError)


@pytest.mark.parametrize("spec", [0, 1.5, ["0:0"], b"pocl"])
def test_non_string_device_spec(spec):
    with pytest.raises(TypeError, match="device must be a pyopencl.Device, 'P:D' or a name substring"):
        select_device(spec)


def test_automatic_choice_is_never_a_simulator(monkeypatch):
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    device = select_device()
    assert not is_simulator(device)
    if any(not is_simulator(e.device) and e.device.type & cl.device_type.GPU for e in list_devices()):
        assert device.type & cl.device_type.GPU


def _fake_entries():
    return [
        DeviceEntry(0, 0, fake_device("Oclgrind Simulator", platform="Oclgrind", units=1000)),
        DeviceEntry(1, 0, fake_device("Big CPU", kind=cl.device_type.CPU, units=128, clock=3000)),
        DeviceEntry(1, 1, fake_device("Small GPU", units=4, clock=500)),
        DeviceEntry(2, 0, fake_device("Large GPU", units=64, clock=1500)),
        DeviceEntry(2, 1, fake_device("Broken GPU", units=500, available=False)),
    ]


def test_ranking_prefers_available_gpus_and_skips_simulators(monkeypatch):
    entries = _fake_entries()
    monkeypatch.setattr(rt_module, "list_devices", lambda: entries)
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    assert select_device().name == "Large GPU"
    assert select_device("gpu").name == "Large GPU"           # best of several matches
    assert select_device("fake").name == "Large GPU"          # a simulator matches too
    assert select_device("cpu").name == "Big CPU"
    assert select_device("oclgrind").name == "Oclgrind Simulator"   # by name only
    assert select_device("1:1").name == "Small GPU"
    monkeypatch.setenv("CLPATCH_DEVICE", "small")
    assert select_device().name == "Small GPU"


def test_only_simulators(monkeypatch):
    monkeypatch.setattr(rt_module, "list_devices", lambda: _fake_entries()[:1])
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    with pytest.raises(clpatch.NoOpenCLError,
                       match="Only simulator devices were found .*CLPATCH_DEVICE=oclgrind"):
        select_device()
    assert select_device("oclgrind").name == "Oclgrind Simulator"


def test_no_devices_explains_how_to_install(monkeypatch):
    monkeypatch.setattr(rt_module, "list_devices", lambda: [])
    with pytest.raises(clpatch.NoOpenCLError, match="pocl-opencl-icd") as info:
        select_device()
    assert "clpatch devices" in str(info.value)
    with pytest.raises(clpatch.NoOpenCLError):
        select_device("pocl")


# ---- Runtime ---------------------------------------------------------------------------------

def test_runtime_on_an_existing_queue(runtime):
    queue = cl.CommandQueue(runtime.context, runtime.device)
    rt = clpatch.Runtime(queue=queue)
    assert rt.queue is queue and rt.context == runtime.context and rt.device == runtime.device
    assert rt.profile == runtime.profile and not rt.profiling
    image = random_image((37, 53), seed=51)
    result = clpatch.search_patches(image, runtime=rt)
    expected = clpatch.search_patches(image, runtime=runtime)
    np.testing.assert_array_equal(result.positions, expected.positions)
    np.testing.assert_array_equal(result.distances, expected.distances)
    assert "Runtime(" in repr(rt) and rt.profile.family in repr(rt)


def test_runtime_for_queue_is_reused(runtime):
    queue = cl.CommandQueue(runtime.context, runtime.device)
    first = clpatch.Runtime.for_queue(queue)
    assert first.queue is queue and clpatch.Runtime.for_queue(queue) is first


def test_runtime_with_device_and_queue(runtime):
    with pytest.raises(ValueError, match="either device or queue"):
        clpatch.Runtime(runtime.device, queue=runtime.queue)


def test_runtime_with_a_bad_queue(runtime):
    with pytest.raises(TypeError, match="queue must be a pyopencl.CommandQueue"):
        clpatch.Runtime(queue=runtime.context)


def test_runtime_refuses_an_out_of_order_queue(runtime):
    props = cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    if not runtime.device.queue_properties & props:
        pytest.skip("the device has no out-of-order queues")
    queue = cl.CommandQueue(runtime.context, runtime.device, properties=props)
    with pytest.raises(ValueError, match="in-order"):
        clpatch.Runtime(queue=queue)


def test_runtime_with_a_bad_profile(runtime):
    with pytest.raises(ValueError,
                       match=r"profile must be one of \('nvidia', 'amd', 'intel', 'cpu', 'generic'\)"):
        clpatch.Runtime(runtime.device, profile="bogus")


def test_runtime_with_profiling(runtime):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    assert rt.profiling
    assert rt.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
    clpatch.search_patches(random_image((37, 53), seed=52), runtime=rt)
    (plan,) = rt.plan_cache().values()
    for _, event in plan.last_events:
        assert event.profile.end >= event.profile.start > 0


def test_runtime_by_spec(runtime):
    rt = clpatch.Runtime(entry_of(runtime.device).index)
    assert rt.device == runtime.device and rt.context != runtime.context
    assert rt.plan_cache() == {} and rt.programs.builds == 0      # building one compiles nothing


def test_default_runtime_is_shared(monkeypatch):
    monkeypatch.setattr(rt_module, "_default_runtime", None)
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    first = clpatch.default_runtime()
    assert clpatch.default_runtime() is first
    assert not first.is_simulator


def test_search_without_a_runtime_uses_the_default(monkeypatch):
    monkeypatch.setattr(rt_module, "_default_runtime", None)
    image = random_image((37, 53), seed=53)
    result = clpatch.search_patches(image)
    assert rt_module._default_runtime is not None
    assert result.config.variant == "square"
    assert isinstance(result.positions, np.ndarray)


# ---- ICD registration ------------------------------------------------------------------------

NVIDIA = "libnvidia-opencl.so.1"


def fake_vendor_folder(tmp_path, monkeypatch):
    """A vendor folder holding a PoCL registration, named by OCL_ICD_VENDORS, with the
    once-per-process check reset; temporary folders go under tmp_path."""
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "pocl.icd").write_text("libpocl.so.2\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))
    monkeypatch.delenv("OPENCL_VENDOR_PATH", raising=False)
    monkeypatch.setattr(rt_module, "_icd_checked", False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return vendors


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """fake_vendor_folder, with drivers 'installed' by adding them to the returned set."""
    vendors = fake_vendor_folder(tmp_path, monkeypatch)
    installed: set[str] = set()
    monkeypatch.setattr(rt_module, "_library_present", lambda soname: soname in installed)
    return SimpleNamespace(vendors=vendors, installed=installed, tmp=tmp_path)


def test_icd_registration_of_a_missing_driver(fake_registry):
    fake_registry.installed.add(NVIDIA)
    assert rt_module.ensure_icd_registration() == [NVIDIA]
    private = Path(os.environ["OCL_ICD_VENDORS"])
    assert private != fake_registry.vendors and private.is_dir()
    assert private.parent == fake_registry.tmp
    files = {p.name: p.read_text() for p in private.iterdir()}
    assert files.pop("pocl.icd") == "libpocl.so.2\n"                  # the old registrations stay
    (new,) = files.values()
    assert new.strip() == NVIDIA
    assert rt_module._registered_libraries(private) == {"libpocl.so.2", NVIDIA}
    # The original folder is left alone, and the check runs once per process.
    assert [p.name for p in fake_registry.vendors.iterdir()] == ["pocl.icd"]
    assert rt_module.ensure_icd_registration() == []
    assert os.environ["OCL_ICD_VENDORS"] == str(private)


def test_icd_registration_when_already_registered(fake_registry):
    (fake_registry.vendors / "nvidia.icd").write_text(f"/usr/lib/x86_64-linux-gnu/{NVIDIA}\n")
    fake_registry.installed.add(NVIDIA)
    assert rt_module.ensure_icd_registration() == []
    assert os.environ["OCL_ICD_VENDORS"] == str(fake_registry.vendors)
    assert sorted(p.name for p in fake_registry.tmp.iterdir()) == ["vendors"]   # nothing created


def test_icd_registration_with_nothing_installed(fake_registry):
    assert rt_module.ensure_icd_registration() == []
    assert os.environ["OCL_ICD_VENDORS"] == str(fake_registry.vendors)


def test_icd_registration_of_several_drivers(fake_registry):
    fake_registry.installed.update({NVIDIA, "libigdrcl.so"})
    assert sorted(rt_module.ensure_icd_registration()) == sorted([NVIDIA, "libigdrcl.so"])
    private = Path(os.environ["OCL_ICD_VENDORS"])
    assert rt_module._registered_libraries(private) == {"libpocl.so.2", NVIDIA, "libigdrcl.so"}


def test_icd_registration_keeps_a_single_icd_file(fake_registry, monkeypatch):
    """OCL_ICD_VENDORS naming one .icd file makes ocl-icd load that one alone: the new
    registry holds it (not the system folder's files) and the missing driver."""
    single = fake_registry.tmp / "only.icd"
    single.write_text("libmine.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(single))
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(fake_registry.vendors))
    assert rt_module._registered_libraries(rt_module._vendor_dir()) == {"libmine.so"}
    fake_registry.installed.add(NVIDIA)
    assert rt_module.ensure_icd_registration() == [NVIDIA]
    private = Path(os.environ["OCL_ICD_VENDORS"])
    assert rt_module._registered_libraries(private) == {"libmine.so", NVIDIA}


def test_icd_entry_names_a_library_outside_the_loader_path(tmp_path, monkeypatch):
    """A driver found only in a folder the dynamic loader does not search (e.g.
    /usr/local/nvidia/lib64) is registered by its full path."""
    fake_vendor_folder(tmp_path, monkeypatch)       # the real _library_present, controlled inputs
    libs = tmp_path / "nvidia-libs"
    libs.mkdir()
    (libs / NVIDIA).write_bytes(b"")
    monkeypatch.setattr(rt_module, "_EXTRA_LIBRARY_DIRS", (str(libs),))
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setattr(rt_module.ctypes.util, "find_library", lambda name: None)
    assert rt_module._library_present(NVIDIA)
    assert not rt_module._library_present("libamdocl64.so")
    assert rt_module.ensure_icd_registration() == [NVIDIA]
    private = Path(os.environ["OCL_ICD_VENDORS"])
    entries = [p.read_text().strip() for p in private.iterdir() if p.name != "pocl.icd"]
    assert entries == [str(libs / NVIDIA)]


def test_library_search(tmp_path, monkeypatch):
    monkeypatch.setattr(rt_module.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(rt_module, "_EXTRA_LIBRARY_DIRS", ())
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{tmp_path}")
    assert not rt_module._library_present(NVIDIA)
    (tmp_path / NVIDIA).write_bytes(b"")
    assert rt_module._library_present(NVIDIA)
    found = []
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setattr(rt_module.ctypes.util, "find_library",
                        lambda name: found.append(name) or "libnvidia-opencl.so.1")
    assert rt_module._library_present(NVIDIA) and found == ["nvidia-opencl"]


def test_vendor_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.delenv("OPENCL_VENDOR_PATH", raising=False)
    assert rt_module._vendor_dir() == Path("/etc/OpenCL/vendors")
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(tmp_path))
    assert rt_module._vendor_dir() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("OCL_ICD_VENDORS", str(other))
    assert rt_module._vendor_dir() == other                   # OCL_ICD_VENDORS comes first
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path / "missing"))
    assert rt_module._vendor_dir() == tmp_path                # not a folder: ignored


def test_registered_libraries_reads_names(tmp_path, monkeypatch):
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    (tmp_path / "a.icd").write_text("/opt/vendor/lib/libA.so.1\n")
    (tmp_path / "b.icd").write_text("libB.so\n")
    (tmp_path / "notes.txt").write_text("libC.so\n")
    assert rt_module._registered_libraries(tmp_path) == {"libA.so.1", "libB.so"}
    assert rt_module._registered_libraries(tmp_path / "missing") == set()


@pytest.mark.parametrize("shape,dtype", [((3, 5), np.float32), ((2, 3, 4, 2), np.int32),
                                         ((7,), np.uint8), ((0, 4), np.float32), ((), np.float32)])
def test_empty_arrays_behave_like_pyopencl_empty(runtime, shape, dtype):
    got = runtime.empty(shape, dtype)
    want = cla.empty(runtime.queue, shape, dtype)
    assert (got.shape, got.dtype, got.strides, got.size, got.nbytes) == (
        want.shape, want.dtype, want.strides, want.size, want.nbytes)
    if got.size:
        values = np.arange(got.size).reshape(shape).astype(dtype)
        got.set(values)
        np.testing.assert_array_equal(got.get(), values)
        np.testing.assert_array_equal((got + got).get(), values + values)
