"""Device discovery and selection (`clpatch.core.devices`): the `P:D` list, what a device
spec may be (index, type, name substring, `CLPATCH_DEVICE`), the ranking, and the ICD
registration of vendor drivers that containers lose (tested on a fake vendor folder: the
process's real OpenCL registry is never touched)."""

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pyopencl as cl
import pytest

import clpatch
from clpatch.core import devices as dev_module
from clpatch.core.devices import (
    DeviceEntry,
    device_kind,
    is_simulator,
    list_devices,
    select_device,
)


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
    with pytest.raises(TypeError, match="device must be a pyopencl.Device, 'P:D', a device type "
                                        "or a name substring"):
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
    monkeypatch.setattr(dev_module, "list_devices", lambda: entries)
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
    monkeypatch.setattr(dev_module, "list_devices", lambda: _fake_entries()[:1])
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    with pytest.raises(clpatch.NoOpenCLError,
                       match="Only simulator devices were found .*CLPATCH_DEVICE=oclgrind"):
        select_device()
    assert select_device("oclgrind").name == "Oclgrind Simulator"


def test_no_devices_explains_how_to_install(monkeypatch):
    monkeypatch.setattr(dev_module, "list_devices", lambda: [])
    with pytest.raises(clpatch.NoOpenCLError, match="pocl-opencl-icd") as info:
        select_device()
    assert "clpatch devices" in str(info.value)
    with pytest.raises(clpatch.NoOpenCLError):
        select_device("pocl")


# ---- device types, blank specs ---------------------------------------------------------------

def _typed_entries():
    """Devices whose names hold no type word: a type spec can only match by type."""
    return [
        DeviceEntry(0, 0, fake_device("Oclgrind Simulator", platform="Oclgrind", units=1000)),
        DeviceEntry(1, 0, fake_device("Epyc 9654", kind=cl.device_type.CPU, units=96, clock=2400)),
        DeviceEntry(1, 1, fake_device("Xeon 6", kind=cl.device_type.CPU, units=8, clock=2000)),
        DeviceEntry(2, 0, fake_device("Tesla V100", units=80, clock=1500)),
        DeviceEntry(2, 1, fake_device("Radeon 780M", units=12, clock=2700)),
    ]


@pytest.mark.parametrize("spec,name", [
    ("cpu", "Epyc 9654"), ("CPU", "Epyc 9654"), (" Cpu ", "Epyc 9654"),
    ("gpu", "Tesla V100"), ("GPU", "Tesla V100"),
])
def test_select_by_type_picks_the_best_of_that_type(monkeypatch, spec, name):
    monkeypatch.setattr(dev_module, "list_devices", _typed_entries)
    assert select_device(spec).name == name
    monkeypatch.setenv("CLPATCH_DEVICE", spec)
    assert select_device().name == name


def test_select_accelerator(monkeypatch):
    entries = [*_typed_entries(),
               DeviceEntry(3, 0, fake_device("Stratix 10", kind=cl.device_type.ACCELERATOR))]
    monkeypatch.setattr(dev_module, "list_devices", lambda: entries)
    assert select_device("accelerator").name == "Stratix 10"
    assert select_device("Accelerator").name == "Stratix 10"


def test_a_type_with_no_device_lists_the_devices(monkeypatch):
    monkeypatch.setattr(dev_module, "list_devices", _typed_entries)
    with pytest.raises(clpatch.DeviceNotFoundError,
                       match=r"device 'accelerator' matches no device: there is no "
                             r"accelerator") as info:
        select_device("accelerator")
    message = str(info.value)
    for entry in _typed_entries():
        assert f"{entry.index}  {entry.label}" in message
    assert "(simulator)" in message and "(CPU)" in message and "(GPU)" in message


def test_a_type_never_picks_a_simulator(monkeypatch):
    """Oclgrind reports every device type; only its name or index chooses it."""
    only = [_typed_entries()[0], _typed_entries()[1]]     # the simulator and a CPU
    monkeypatch.setattr(dev_module, "list_devices", lambda: only)
    with pytest.raises(clpatch.DeviceNotFoundError, match="there is no GPU"):
        select_device("gpu")
    assert select_device("cpu").name == "Epyc 9654"


def test_select_cpu_on_this_machine():
    cpus = [e for e in list_devices()
            if e.device.type & cl.device_type.CPU and not is_simulator(e.device)]
    if not cpus:
        pytest.skip("no CPU OpenCL device")
    device = select_device("cpu")
    assert device in [e.device for e in cpus]
    assert clpatch.Runtime("CPU").device == device


def test_device_kind():
    kinds = [device_kind(e.device) for e in _typed_entries()]
    assert kinds == ["simulator", "CPU", "CPU", "GPU", "GPU"]
    assert device_kind(fake_device("FPGA", kind=cl.device_type.ACCELERATOR)) == "accelerator"


@pytest.mark.parametrize("spec", ["", " ", "\t ", "\n"])
def test_blank_device_spec_is_refused(monkeypatch, spec):
    def no_listing():
        raise AssertionError("a blank spec must be refused before listing devices")

    monkeypatch.setattr(dev_module, "list_devices", no_listing)
    with pytest.raises(ValueError, match=r"^device is blank .*'P:D' index, a device type"):
        select_device(spec)
    with pytest.raises(ValueError, match="^device is blank"):
        clpatch.Runtime(spec)


@pytest.mark.parametrize("value", [" ", "   ", "\t"])
def test_blank_clpatch_device_is_refused(monkeypatch, value):
    monkeypatch.setenv("CLPATCH_DEVICE", value)
    with pytest.raises(ValueError, match=r"^CLPATCH_DEVICE is blank .*or unset it"):
        select_device()
    with pytest.raises(ValueError, match="^CLPATCH_DEVICE is blank"):
        clpatch.Runtime()


def test_empty_clpatch_device_means_unset(monkeypatch):
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    default = select_device()
    monkeypatch.setenv("CLPATCH_DEVICE", "")
    assert select_device() == default


def test_unknown_clpatch_device_names_the_variable(monkeypatch):
    monkeypatch.setenv("CLPATCH_DEVICE", "no-such-device-anywhere")
    with pytest.raises(clpatch.DeviceNotFoundError) as info:
        select_device()
    first = str(info.value).splitlines()[0]
    assert first.startswith("device 'no-such-device-anywhere' (from CLPATCH_DEVICE) matches "
                            "no device")
    for e in list_devices():
        assert f"{e.index}  {e.label}" in str(info.value)


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
    monkeypatch.setattr(dev_module, "_icd_checked", False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return vendors


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """fake_vendor_folder, with drivers 'installed' by adding them to the returned set."""
    vendors = fake_vendor_folder(tmp_path, monkeypatch)
    installed: set[str] = set()
    monkeypatch.setattr(dev_module, "_library_present", lambda soname: soname in installed)
    return SimpleNamespace(vendors=vendors, installed=installed, tmp=tmp_path)


def test_icd_registration_of_a_missing_driver(fake_registry):
    fake_registry.installed.add(NVIDIA)
    assert dev_module.ensure_icd_registration() == [NVIDIA]
    private = Path(os.environ["OCL_ICD_VENDORS"])
    assert private != fake_registry.vendors and private.is_dir()
    assert private.parent == fake_registry.tmp
    files = {p.name: p.read_text() for p in private.iterdir()}
    assert files.pop("pocl.icd") == "libpocl.so.2\n"                  # the old registrations stay
    (new,) = files.values()
    assert new.strip() == NVIDIA
    assert dev_module._registered_libraries(private) == {"libpocl.so.2", NVIDIA}
    # The original folder is left alone, and the check runs once per process.
    assert [p.name for p in fake_registry.vendors.iterdir()] == ["pocl.icd"]
    assert dev_module.ensure_icd_registration() == []
    assert os.environ["OCL_ICD_VENDORS"] == str(private)


def test_icd_registration_when_already_registered(fake_registry):
    (fake_registry.vendors / "nvidia.icd").write_text(f"/usr/lib/x86_64-linux-gnu/{NVIDIA}\n")
    fake_registry.installed.add(NVIDIA)
    assert dev_module.ensure_icd_registration() == []
    assert os.environ["OCL_ICD_VENDORS"] == str(fake_registry.vendors)
    assert sorted(p.name for p in fake_registry.tmp.iterdir()) == ["vendors"]   # nothing created


def test_icd_registration_with_nothing_installed(fake_registry):
    assert dev_module.ensure_icd_registration() == []
    assert os.environ["OCL_ICD_VENDORS"] == str(fake_registry.vendors)


def test_icd_registration_of_several_drivers(fake_registry):
    fake_registry.installed.update({NVIDIA, "libigdrcl.so"})
    assert sorted(dev_module.ensure_icd_registration()) == sorted([NVIDIA, "libigdrcl.so"])
    private = Path(os.environ["OCL_ICD_VENDORS"])
    assert dev_module._registered_libraries(private) == {"libpocl.so.2", NVIDIA, "libigdrcl.so"}


def test_icd_registration_keeps_a_single_icd_file(fake_registry, monkeypatch):
    """OCL_ICD_VENDORS naming one .icd file makes ocl-icd load that one alone: the new
    registry holds it (not the system folder's files) and the missing driver."""
    single = fake_registry.tmp / "only.icd"
    single.write_text("libmine.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(single))
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(fake_registry.vendors))
    assert dev_module._registered_libraries(dev_module._vendor_dir()) == {"libmine.so"}
    fake_registry.installed.add(NVIDIA)
    assert dev_module.ensure_icd_registration() == [NVIDIA]
    private = Path(os.environ["OCL_ICD_VENDORS"])
    assert dev_module._registered_libraries(private) == {"libmine.so", NVIDIA}


def test_icd_entry_names_a_library_outside_the_loader_path(tmp_path, monkeypatch):
    """A driver found only in a folder the dynamic loader does not search (e.g.
    /usr/local/nvidia/lib64) is registered by its full path."""
    fake_vendor_folder(tmp_path, monkeypatch)       # the real _library_present, controlled inputs
    libs = tmp_path / "nvidia-libs"
    libs.mkdir()
    (libs / NVIDIA).write_bytes(b"")
    monkeypatch.setattr(dev_module, "_EXTRA_LIBRARY_DIRS", (str(libs),))
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setattr(dev_module.ctypes.util, "find_library", lambda name: None)
    assert dev_module._library_present(NVIDIA)
    assert not dev_module._library_present("libamdocl64.so")
    assert dev_module.ensure_icd_registration() == [NVIDIA]
    private = Path(os.environ["OCL_ICD_VENDORS"])
    entries = [p.read_text().strip() for p in private.iterdir() if p.name != "pocl.icd"]
    assert entries == [str(libs / NVIDIA)]


def test_library_search(tmp_path, monkeypatch):
    monkeypatch.setattr(dev_module.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(dev_module, "_EXTRA_LIBRARY_DIRS", ())
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{tmp_path}")
    assert not dev_module._library_present(NVIDIA)
    (tmp_path / NVIDIA).write_bytes(b"")
    assert dev_module._library_present(NVIDIA)
    found = []
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setattr(dev_module.ctypes.util, "find_library",
                        lambda name: found.append(name) or "libnvidia-opencl.so.1")
    assert dev_module._library_present(NVIDIA) and found == ["nvidia-opencl"]


def test_vendor_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.delenv("OPENCL_VENDOR_PATH", raising=False)
    assert dev_module._vendor_dir() == Path("/etc/OpenCL/vendors")
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(tmp_path))
    assert dev_module._vendor_dir() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("OCL_ICD_VENDORS", str(other))
    assert dev_module._vendor_dir() == other                  # OCL_ICD_VENDORS comes first
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path / "missing"))
    assert dev_module._vendor_dir() == tmp_path               # not a folder: ignored


def test_registered_libraries_reads_names(tmp_path, monkeypatch):
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    (tmp_path / "a.icd").write_text("/opt/vendor/lib/libA.so.1\n")
    (tmp_path / "b.icd").write_text("libB.so\n")
    (tmp_path / "notes.txt").write_text("libC.so\n")
    assert dev_module._registered_libraries(tmp_path) == {"libA.so.1", "libB.so"}
    assert dev_module._registered_libraries(tmp_path / "missing") == set()
