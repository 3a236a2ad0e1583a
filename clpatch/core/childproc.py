"""Child processes that do OpenCL work for this process, so that a driver which kills its
process (a compiler or a kernel dying by SIGSEGV, an abort) ends the child, not the caller,
and the caller can say so. The build child (`clpatch.core.buildchild`) compiles programs;
the task child (`clpatch.core.taskchild`) runs the self-test's families and the warmup's
steps.

A child is `python -c <bootstrap>` with this process's interpreter, importing the clpatch
package this process runs (its folder goes first on the child's path when it is not on it
already) and calling `<module>.main()`, with this process's environment (the same OpenCL
drivers and ICD registration, the same program and tuning caches). A `bare` child does not
run the package's `__init__` (which imports every engine): it imports only `module` and
what that imports, which halves the start of a build child (0.28 s instead of 0.55 s to
import on a 2-core CPU, measured). It finds this process's
device by `device_key`: platform name, device name, driver version and the ordinal among
identical devices, never by a context or a handle.

Messages go over the child's stdin and a copy of its stdout: one JSON line each, followed by
`size` raw bytes when the line has a "size". The child points its own stdout (file
descriptor 1) at stderr first, so what a driver prints cannot garble the messages; its
stderr is this process's. A child dying is seen as the end of its stdout; `how_it_died`
names the signal ("SIGSEGV") or the exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pyopencl as cl

from .devices import get_platforms

#: The clpatch package's folder, and its parent: where the child imports clpatch from.
PACKAGE = Path(__file__).resolve().parents[1]
ROOT = str(PACKAGE.parent)

_BOOTSTRAP = ("import sys\nif {root!r} not in sys.path:\n    sys.path.insert(0, {root!r})\n"
              "{bare}from {module} import main\nmain()\n")
# The package as an empty module whose submodules are found in its folder.
_BARE = ("import types\npackage = types.ModuleType('clpatch')\n"
         "package.__path__ = [{folder!r}]\nsys.modules['clpatch'] = package\n")

#: Seconds a closed child gets to exit before it is killed.
CLOSE_SECONDS = 5.0

_KEY_FIELDS = ("platform", "device", "driver")


def _identity(device: Any) -> tuple[str, str, str]:
    return (device.platform.name.strip(), device.name.strip(), device.driver_version.strip())


def device_key(device: Any) -> dict[str, Any] | None:
    """What a child needs to open `device` again: its platform name, name, driver version
    and its ordinal among the devices that share all three; None when `device` is not among
    the platforms' devices (then no child can find it)."""
    identity, ordinal = _identity(device), 0
    for platform in get_platforms():
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for candidate in devices:
            if candidate == device:
                return dict(zip(_KEY_FIELDS, identity, strict=True), ordinal=ordinal)
            if _identity(candidate) == identity:
                ordinal += 1
    return None


def find_device(key: dict[str, Any]) -> Any:
    """The device `key` (from `device_key`) names, or None."""
    identity = tuple(key.get(name) for name in _KEY_FIELDS)
    seen = 0
    for platform in get_platforms():
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for device in devices:
            if _identity(device) == identity:
                if seen == key.get("ordinal"):
                    return device
                seen += 1
    return None


def implementation(device: Any) -> str:
    """The OpenCL implementation of `device`: platform name and driver version
    ('Intel(R) OpenCL 2026.22.10.0.01_160000')."""
    return f"{device.platform.name.strip()} {device.driver_version.strip()}"


def how_it_died(returncode: int) -> str:
    """'SIGSEGV' for a process killed by a signal, else 'exit status N'."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def send(stream: BinaryIO, header: dict[str, Any], payload: bytes = b"") -> None:
    """Write one message (`header`, and `payload` after it) and flush."""
    if payload:
        header = dict(header, size=len(payload))
    stream.write(json.dumps(header).encode() + b"\n")
    if payload:
        stream.write(payload)
    stream.flush()


def receive(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """The next message (header, payload), or None at the end of the stream. ValueError
    for something that is not a message."""
    line = stream.readline()
    if not line:
        return None
    header = json.loads(line)
    if not isinstance(header, dict):
        raise ValueError(f"not a message: {line[:80]!r}")
    size = header.get("size", 0)
    payload = stream.read(size) if size else b""
    if len(payload) != size:
        return None                 # the writer died in the middle of the message
    return header, payload


def child_streams() -> tuple[BinaryIO, BinaryIO]:
    """In a child: its message streams (stdin, a copy of stdout), with file descriptor 1 (and
    `sys.stdout`) pointed at stderr from now on."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out


class Child:
    """One child process running `module.main()` (see the module doc), `bare` or not.
    OSError when it cannot be started."""

    def __init__(self, module: str, bare: bool = False) -> None:
        if not sys.executable:
            raise OSError("no Python interpreter to start (sys.executable is empty)")
        bare_code = _BARE.format(folder=str(PACKAGE)) if bare else ""
        code = _BOOTSTRAP.format(root=ROOT, module=module, bare=bare_code)
        self.process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        self.garbled = False

    def ask(self, header: dict[str, Any], payload: bytes = b"",
            on_note: Callable[[dict[str, Any]], Any] | None = None
            ) -> tuple[dict[str, Any], bytes] | None:
        """Send a message and wait for the reply; messages holding a "note" that come before
        it go to `on_note`. None when the child ended instead of replying (see `death`). An
        exception raised meanwhile (Ctrl-C, `on_note`'s) kills the child and propagates."""
        try:
            try:
                send(self.process.stdin, header, payload)
            except OSError:         # it is gone already
                return None
            while True:
                try:
                    reply = receive(self.process.stdout)
                except ValueError:
                    self.garbled = True
                    self.close(kill=True)
                    return None
                if reply is None or "note" not in reply[0]:
                    return reply
                if on_note is not None:
                    on_note(reply[0]["note"])
        except BaseException:
            self.close(kill=True)
            raise

    def death(self) -> str:
        """How the child ended ('SIGSEGV', 'exit status 1'), once it has: waits for it,
        CLOSE_SECONDS at most (then it is killed: it closed its replies but lived on)."""
        try:
            code = self.process.wait(CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self.close(kill=True)
            return "stopped replying"
        return "garbled its replies" if self.garbled else how_it_died(code)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, kill: bool = False) -> None:
        """End the child: close its stdin (it exits at the end of its input) and wait for it,
        killing it if it does not exit within CLOSE_SECONDS or when `kill` is True."""
        if kill:
            self.process.kill()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
