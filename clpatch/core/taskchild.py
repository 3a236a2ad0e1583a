"""Run tasks on a copy of a runtime in a child process (`clpatch.core.childproc`), so that a
task whose driver kills its process (a kernel or a compiler dying by SIGSEGV, an abort) is
reported as a `TaskCrash` and the next task runs in a fresh child. The self-test runs its
families this way, `clpatch warmup` its steps.

`TaskChild(runtime, worker)`: `worker` names a function, "package.module:function", that
the child calls with its runtime and each task (a JSON-able dict) and that returns a
JSON-able dict. The child's runtime has the parent runtime's device (found again by
platform, name, driver and ordinal), profile (overrides included), memory limit, launches
in flight, profiling and tuning file; the environment, and with it the program cache, is
the parent's. Each build event of the child is handed to the parent runtime's build-progress
hook (or the process-wide one), so a display of builds sees them as if they were its own.

One child runs the tasks one after the other, and is started again only after one died:
a child costs about 0.7 s to start on a 2-core CPU (Python, clpatch's imports, a context),
once per run rather than once per task.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from dataclasses import dataclass
from typing import Any

from .childproc import Child, child_streams, device_key, find_device, implementation, receive, send
from .kernels import BuildEvent, default_build_progress
from .profiles import DeviceProfile
from .runtime import Runtime

log = logging.getLogger("clpatch")

MODULE = "clpatch.core.taskchild"


class ChildUnavailable(Exception):
    """No child could run the tasks (the message says why): run them in this process."""


@dataclass(frozen=True)
class TaskCrash:
    """A task's process died: `how` ('SIGSEGV', 'exit status 1') on `implementation` (the
    platform and driver); `builds`: programs its child had finished compiling for it."""

    how: str
    implementation: str
    builds: int = 0

    @property
    def sentence(self) -> str:
        """'the process running it died (SIGSEGV) on Intel(R) OpenCL 2026.22...'."""
        return f"the process running it died ({self.how}) on {self.implementation}"


def _profile_fields(profile: DeviceProfile) -> dict[str, Any]:
    fields = {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)}
    fields["origins"], fields["notes"] = dict(profile.origins), dict(profile.notes)
    return fields


class TaskChild:
    """Runs `worker` on tasks in a child process on a copy of `runtime` (see the module doc).
    Use it as a context manager, or `close()` it."""

    def __init__(self, runtime: Runtime, worker: str) -> None:
        self.runtime = runtime
        self.worker = worker
        self._child: Child | None = None
        self._unavailable: str | None = None
        self._builds = 0

    def _hello(self) -> dict[str, Any]:
        rt = self.runtime
        key = device_key(rt.device)
        if key is None:
            raise ChildUnavailable("the device is not among the platforms' devices")
        return dict(device=key, worker=self.worker, profile=_profile_fields(rt.profile),
                    memory_limit=rt.memory_limit, max_in_flight=rt.max_in_flight,
                    profiling=rt.profiling, tuning=str(rt.tuning.path),
                    log_level=log.getEffectiveLevel())

    def _start(self) -> Child:
        if self._unavailable is not None:
            raise ChildUnavailable(self._unavailable)
        try:
            hello = self._hello()
            child = Child(MODULE)
            reply = child.ask(hello)
            if reply is None:
                raise ChildUnavailable(f"its child process ended before it was ready "
                                       f"({child.death()})")
            if not reply[0].get("ok"):
                child.close()
                raise ChildUnavailable(f"its child process could not start: {reply[0].get('why')}")
        except (ChildUnavailable, OSError) as exc:
            self._unavailable = str(exc)
            raise ChildUnavailable(self._unavailable) from None
        return child

    def _note(self, note: dict[str, Any]) -> None:
        event = BuildEvent(**note)
        if event.phase == "done":
            self._builds += 1
        hook = self.runtime.build_progress or default_build_progress()
        if hook is not None:
            hook(event)

    def run(self, task: dict[str, Any]) -> dict[str, Any] | TaskCrash:
        """The worker's result for `task`, or a `TaskCrash` when the child died running it
        (the next task starts a new child). ChildUnavailable when no child can be started;
        RuntimeError when the worker raised in the child."""
        if self._child is None:
            self._child = self._start()
        child, self._builds = self._child, 0
        reply = child.ask({"task": task}, on_note=self._note)
        if reply is None:
            self._child = None
            return TaskCrash(child.death(), implementation(self.runtime.device), self._builds)
        header = reply[0]
        if "result" not in header:
            raise RuntimeError(f"{self.worker} failed in the child process: {header.get('error')}")
        return header["result"]

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None

    def __enter__(self) -> TaskChild:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main() -> None:
    """The child: make the runtime the first message describes, then run the worker on each
    task sent, replying with its result (or its error), until the end of the input."""
    inp, out = child_streams()
    try:
        message = receive(inp)
        hello = {} if message is None else message[0]
        device = find_device(hello.get("device", {}))
        if device is None:
            send(out, {"ok": False, "why": "no such device here"})
            return
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(hello.get("log_level", logging.WARNING))
        module, _, name = hello["worker"].partition(":")
        worker = getattr(importlib.import_module(module), name)
        runtime = Runtime(device, profile=DeviceProfile(**hello["profile"]),
                          memory_limit=hello["memory_limit"],
                          max_in_flight=hello["max_in_flight"], profiling=hello["profiling"],
                          build_progress=lambda e: send(out, {"note": dataclasses.asdict(e)}))
        runtime.use_tuning(hello["tuning"])
        send(out, {"ok": True})
        while (message := receive(inp)) is not None:
            try:
                result = worker(runtime, message[0]["task"])
            except Exception as exc:  # reported to the parent, which raises it
                send(out, {"error": f"{type(exc).__name__}: {exc}"})
            else:
                send(out, {"result": result})
    except (KeyboardInterrupt, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
