"""`--device` and `CLPATCH_DEVICE` on the command line: device types, blank specs, and what
`clpatch devices` says when CLPATCH_DEVICE matches no device."""

import numpy as np
import pyopencl as cl
import pytest

import clpatch
from clpatch.cli import main as cli
from clpatch.core.devices import is_simulator, list_devices
from tests.helpers import random_image


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cpu_device():
    if not any(e.device.type & cl.device_type.CPU and not is_simulator(e.device)
               for e in list_devices()):
        pytest.skip("no CPU OpenCL device")
    return clpatch.select_device("cpu")


@pytest.mark.parametrize("value", ["bogus-device-name", "99:0", "gpu-x"])
def test_devices_with_an_unknown_clpatch_device(capsys, monkeypatch, value):
    monkeypatch.setenv("CLPATCH_DEVICE", value)
    code, out, err = run(capsys, "devices")
    assert code == 0, err
    for entry in list_devices():
        assert f"  {entry.index}  {entry.label}" in out          # listed, none marked default
    assert not [line for line in out.splitlines() if line.startswith("* ")]
    (note,) = [line for line in out.splitlines() if line.startswith("no default device:")]
    assert (f"CLPATCH_DEVICE={value!r} matches none of the devices listed above" in note)
    assert "'P:D' index, a device type (cpu, gpu, accelerator)" in note and "unset it" in note
    assert not out.rstrip().endswith("devices are:")


def test_devices_with_a_blank_clpatch_device(capsys, monkeypatch):
    monkeypatch.setenv("CLPATCH_DEVICE", "   ")
    code, out, err = run(capsys, "devices")
    assert code == 0, err
    for entry in list_devices():
        assert f"{entry.index}  {entry.label}" in out
    assert "no default device: CLPATCH_DEVICE='   ' is blank" in out


def test_devices_with_a_type_in_clpatch_device(capsys, monkeypatch):
    device = cpu_device()
    monkeypatch.setenv("CLPATCH_DEVICE", "CPU")
    code, out, err = run(capsys, "devices")
    assert code == 0, err
    index = next(e.index for e in list_devices() if e.device == device)
    marked = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(marked) == 1 and marked[0].startswith(f"* {index}  ")


@pytest.mark.parametrize("spec", ["cpu", "CPU"])
def test_search_on_device_type(capsys, tmp_path, spec):
    device = cpu_device()
    path = tmp_path / "small.npy"
    np.save(path, random_image((20, 24)))
    code, out, err = run(capsys, "search", path, "-w", 7, "-n", 4, "--device", spec)
    assert code == 0, err
    assert device.name.strip() in out


@pytest.mark.parametrize("spec", ["", "  "])
def test_blank_device_option_is_a_usage_error(capsys, tmp_path, spec):
    path = tmp_path / "small.npy"
    np.save(path, random_image((20, 24)))
    code, out, err = run(capsys, "search", path, "--device", spec)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("clpatch: error: argument --device/-d: is blank")
    assert "'P:D' index, a device type (cpu, gpu, accelerator)" in line


def test_blank_clpatch_device_fails_a_command(capsys, tmp_path, monkeypatch):
    path = tmp_path / "small.npy"
    np.save(path, random_image((20, 24)))
    monkeypatch.setenv("CLPATCH_DEVICE", " ")
    code, out, err = run(capsys, "search", path, "-w", 7, "-n", 4)
    assert code == 2
    assert err.startswith("clpatch: error: CLPATCH_DEVICE is blank")
    assert "Traceback" not in err
