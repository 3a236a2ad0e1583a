"""`clpatch devices [--check]`: list the OpenCL devices with their profiles, mark the default
one, and optionally check each with a small search against NumPy. Finding no device, or with
--check none that works, is the outcome of its work: a CommandError, exit 1 (see `common`)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from ..core.devices import (
    INSTALL_HELP,
    SPEC_FORMS,
    DeviceEntry,
    device_kind,
    get_platforms,
    is_simulator,
    list_devices,
    select_device,
)
from ..core.errors import ClpatchError
from ..core.profiles import FAMILIES, family_for_device, profile_for_device
from ..core.runtime import Runtime
from ..match.matches import grid_positions
from ..match.window.search import search_patches
from .common import CommandError, first_line

# The search `devices --check` runs on every device: small, on the default (rule) path, with
# the last grid row and column off the step-4 lattice so the border kernel runs too.
CHECK_SHAPE = (22, 27)
CHECK_PARAMS = dict(patch_size=8, step=4, window=9, k=4)


def _kib(nbytes: int) -> str:
    return f"{nbytes // 1024} KiB" if nbytes % 1024 == 0 else f"{nbytes} bytes"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _forced_family() -> str | None:
    forced = os.environ.get("CLPATCH_PROFILE") or None
    return forced if forced in FAMILIES else None


def describe_entry(entry: DeviceEntry, default: bool) -> list[str]:
    """The lines `clpatch devices` prints for one device."""
    device = entry.device
    mark = "*" if default else " "
    lines = [f"{mark} {entry.index}  {entry.label}" + ("   <- default" if default else "")]
    try:
        matched = family_for_device(device)
        forced = _forced_family()
        profile = profile_for_device(device, family=forced)
        family = (f"{forced} (forced by CLPATCH_PROFILE; the device matches {matched})"
                  if forced and forced != matched else matched)
        lines += [
            f"      {device_kind(device)}, {device.version.strip()}, driver {device.driver_version.strip()}",
            f"      profile {family}; {profile.compute_units} compute units, local memory "
            f"{_kib(profile.local_mem_size)}, max work-group {profile.max_work_group_size}",
            f"      sub-groups {profile.subgroup_ops}; atomics: int64 {_yes(profile.int64_atomics)}, "
            f"float {_yes(profile.float_atomics)}; fp64 {_yes(profile.fp64)}",
        ]
        problems = entry.problems()
    except Exception as exc:  # a driver that cannot answer a query is itself worth showing
        problems = [f"cannot query the device: {first_line(exc)}"]
    lines += [f"      ! {problem}" for problem in problems]
    return lines


def check_device(entry: DeviceEntry) -> str | None:
    """Run a tiny search on the device and compare it with NumPy; None when it works,
    else what went wrong."""
    image = (np.random.default_rng(7).random(CHECK_SHAPE) * 255).astype(np.float32)
    try:
        runtime = Runtime(entry.device)
        result = search_patches(image, runtime=runtime, **CHECK_PARAMS)
    except Exception as exc:  # any failure means this device is unusable; say why
        return f"{type(exc).__name__}: {first_line(exc)}"
    expected = brute_force_distances(image, **CHECK_PARAMS)
    error = np.abs(result.distances.astype(np.float64) - expected)
    if not np.all(error <= 1e-4 * np.abs(expected) + 1e-2):
        return (f"{result.config.describe()} gave wrong distances "
                f"(largest error {error.max():.3g}); the driver miscompiles clpatch's kernels")
    return None


def brute_force_distances(image: np.ndarray, patch_size: int, step: int, window: int,
                          k: int) -> np.ndarray:
    """The k smallest L2 distances of every reference of a small 2-D image, in NumPy."""
    rows, cols = image.shape
    data = image.astype(np.float64)
    half = window // 2
    gy = grid_positions(rows, patch_size, step)
    gx = grid_positions(cols, patch_size, step)
    out = np.empty((len(gy), len(gx), k))
    for i, y in enumerate(gy):
        for j, x in enumerate(gx):
            ref = data[y:y + patch_size, x:x + patch_size]
            found = [float(((data[cy:cy + patch_size, cx:cx + patch_size] - ref) ** 2).sum())
                     for cy in range(max(0, y - half), min(rows - patch_size, y + half) + 1)
                     for cx in range(max(0, x - half), min(cols - patch_size, x + half) + 1)]
            out[i, j] = np.sort(found)[:k]
    return out


def _install_advice() -> str:
    """INSTALL_HELP without its first sentence (which says that no platform exists at all)."""
    first, _, rest = INSTALL_HELP.partition("\n")
    return first[first.find("Install"):] + "\n" + rest if "Install" in first else INSTALL_HELP


def default_device(env: str | None, entries: list[DeviceEntry]) -> tuple[Any, str | None]:
    """The device clpatch uses by default, or None and why there is none (`env`: the value
    of CLPATCH_DEVICE, None when unset or empty)."""
    try:
        return select_device(), None
    except (ClpatchError, ValueError) as exc:
        if env is None:
            return None, ("only simulators were found; choose one by name "
                          "(CLPATCH_DEVICE=oclgrind)"
                          if all(is_simulator(e.device) for e in entries) else first_line(exc))
        reason = "is blank" if not env.strip() else "matches none of the devices listed above"
        return None, (f"CLPATCH_DEVICE={env!r} {reason}, so every command that runs kernels "
                      f"fails until it is fixed: set it to {SPEC_FORMS}, "
                      "or unset it")


def cmd_devices(args: argparse.Namespace) -> int:
    entries = list_devices()
    empty = [(p, platform) for p, platform in enumerate(get_platforms())
             if not any(e.platform_index == p for e in entries)]
    if not entries:
        for p, platform in empty:
            print(f"platform {p} ({platform.name.strip()}) has no devices")
        raise CommandError(INSTALL_HELP)
    env = os.environ.get("CLPATCH_DEVICE") or None
    forced = os.environ.get("CLPATCH_PROFILE") or None
    if forced and forced not in FAMILIES:
        print(f"note: CLPATCH_PROFILE={forced} is ignored here and refused by clpatch.Runtime: "
              f"it must be one of {', '.join(FAMILIES)}")
    default, default_note = default_device(env, entries)
    print(f"OpenCL devices ({len(entries)}); * marks the one clpatch uses by default"
          + (f" (CLPATCH_DEVICE={env})" if env else "") + ":")
    for entry in entries:
        is_default = default is not None and entry.device == default
        print("\n".join(describe_entry(entry, is_default)))
    for p, platform in empty:
        print(f"  {p}:-  {platform.name.strip()}: platform without devices")
    if default_note:
        print(f"no default device: {default_note}")
    if not args.check:
        return 0

    print("\nChecking each device with a small search:")
    working = 0
    for entry in entries:
        name = f"  {entry.index}  {entry.device.name.strip()}"
        if is_simulator(entry.device):
            print(f"{name}: skipped (simulator)")
            continue
        start = time.perf_counter()
        problem = check_device(entry)
        if problem is None:
            working += 1
            print(f"{name}: ok ({time.perf_counter() - start:.1f} s)")
        else:
            print(f"{name}: FAILED: {problem}")
    if working == 0:
        raise CommandError("no OpenCL device other than a simulator works. " + _install_advice())
    print(f"{working} working device(s).")
    return 0


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `devices` to the command line's sub-commands."""
    devices = commands.add_parser("devices", help="list OpenCL platforms and devices",
                                  description="List every OpenCL device with its 'P:D' index, "
                                  "profile and limits; * marks the default choice.")
    devices.add_argument("--check", action="store_true",
                         help="also run a small search on every non-simulator device; exit 1 "
                              "when none works")
    devices.set_defaults(func=cmd_devices)
