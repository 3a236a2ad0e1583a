"""One-line progress displays of the command line on stderr: `Progress`, a bar for long runs
(denoising the frames of a video), and `BuildProgress`, the line shown while OpenCL programs
are compiled (the first run of a kind on a device).

`Progress` redraws a single line with a carriage return: the label, a bar, done/total, the
elapsed time, the rate and an estimate of the time left (without a total: the count and the
rate only). It draws only on terminals unless told otherwise, so logs and pipes stay clean,
and at most every `min_interval` seconds, except for the last update and on close, which
also ends the line.

`BuildProgress` is a build-progress hook (`clpatch.core.kernels.BuildEvent`): on a terminal,
once builds have taken `delay` seconds, one line "building kernels: <n> built <time spent>
(first run on <device>, cached afterwards): <template being built>" redrawn while they last
and ended when they pause (cut to the terminal's width: the counts come first); nothing
when every program comes from the cache. Elsewhere it prints one line per program built
when told to (`--verbose`), else nothing.
"""

from __future__ import annotations

import math
import shutil
import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

from ..core.kernels import BuildEvent

BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    """'mm:ss', or 'h:mm:ss' from an hour on; '--:--' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is a terminal (False for a stream without isatty, or closed)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """A progress line on `stream` (default: sys.stderr); also a context manager.

    total: the number of steps, or None when unknown.
    enabled: None draws only when the stream is a terminal; False never draws anything.
    min_interval: the least time in seconds between two redraws (the last one is never held).
    unit: what is counted, for the rate ("frames/s").
    """

    def __init__(self, total: int | None, label: str, stream: TextIO | None = None, *,
                 enabled: bool | None = None, min_interval: float = 0.2,
                 unit: str = "frames") -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self.min_interval = min_interval
        self.unit = unit
        self.done = 0
        self.note = ""
        self._start = time.monotonic()
        self._last_draw: float | None = None
        self._last_width = 0
        self._closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def update(self, done: int, note: str = "") -> None:
        """Record that `done` steps are finished; redraw unless the last redraw is too recent."""
        self.done = done
        self.note = note
        if not self.enabled or self._closed:
            return
        now = time.monotonic()
        final = self.total is not None and done >= self.total
        if not final and self._last_draw is not None and now - self._last_draw < self.min_interval:
            return
        self._draw(now)

    def close(self) -> None:
        """Draw the final state and end the line (nothing when disabled); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        """The text of the progress line at time `now` (default: the current time)."""
        elapsed = (time.monotonic() if now is None else now) - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [self.label]
        if self.total is not None:
            fraction = min(max(self.done / self.total, 0.0), 1.0) if self.total > 0 else 1.0
            filled = int(BAR_WIDTH * fraction)
            left = (self.total - self.done) / rate if rate > 0 else math.inf
            parts += [f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}]", f"{self.done}/{self.total}",
                      format_duration(elapsed), f"{rate:.2f} {self.unit}/s",
                      f"ETA {format_duration(max(left, 0.0))}"]
        else:
            parts += [f"{self.done} {self.unit}", format_duration(elapsed), f"{rate:.2f} {self.unit}/s"]
        if self.note:
            parts.append(self.note)
        return " ".join(parts)

    def _draw(self, now: float) -> None:
        end_build_line()  # a "building kernels" line left open would be overwritten
        text = self.line(now)
        if is_terminal(self.stream):  # keep to one terminal line, or "\r" cannot redraw it
            text = text[:max(shutil.get_terminal_size().columns - 1, 20)]
        padding = " " * max(self._last_width - len(text), 0)  # clear a longer previous line
        self.stream.write("\r" + text + padding)
        self.stream.flush()
        self._last_width = len(text)
        self._last_draw = now


#: The `BuildProgress` whose line is drawn and not yet ended, if any.
_open_build_line: list[BuildProgress] = []


def end_build_line() -> None:
    """End the "building kernels" line if one is open (before other output on stderr)."""
    for display in list(_open_build_line):
        display.end_line()


def _short_template(template: str) -> str:
    return template.removesuffix(".mako").removesuffix(".cl")


class BuildProgress:
    """What the command line shows while OpenCL programs are compiled; a build-progress hook
    (call it with each `BuildEvent`; thread-safe) and a context manager.

    stream: where to write (default: sys.stderr, looked up when the display is made; an
        `EndsBuildLine` is unwrapped).
    enabled: None draws the line only when the stream is a terminal; False never draws it.
    verbose: where the line is not drawn, print one line per program built instead.
    delay: seconds of building before the line appears (short builds stay silent).
    interval: seconds between redraws; the line ends after builds pause this long.
    label: what builds (e.g. a step of a longer run that has named the device), put before
        the line in place of the device note, or "".
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None,
                 verbose: bool = False, delay: float = 1.0, interval: float = 0.25,
                 label: str = "") -> None:
        stream = stream if stream is not None else sys.stderr
        while isinstance(stream, EndsBuildLine):    # its writes would end this very line
            stream = stream.wrapped
        self.stream = stream
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self.verbose = verbose
        self.delay = delay
        self.interval = interval
        self.label = label
        self.built = 0              # programs compiled since the display was made
        self.seconds = 0.0          # their compile times, summed
        self.device = ""
        self.stored = True
        self._lock = threading.RLock()
        self._active: dict[int, tuple[str, float]] = {}   # thread -> (template, start)
        self._last_end = 0.0
        self._line_open = False
        self._last_width = 0
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def __enter__(self) -> BuildProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __call__(self, event: BuildEvent) -> None:
        now = time.monotonic()
        thread = threading.get_ident()
        with self._lock:
            self.device, self.stored = event.device, event.stored
            if event.phase == "start":
                self._active[thread] = (event.template, now)
                if self.enabled:
                    self._start_ticker()
                    if self._building_seconds(now) >= self.delay:
                        self._draw(now)
                return
            self._active.pop(thread, None)
            self._last_end = now
            if event.phase != "done":
                return
            self.built += 1
            self.seconds += event.seconds
            if self.enabled:
                if self._line_open:
                    self._draw(now)
            elif self.verbose:
                self.stream.write(f"clpatch: built {_short_template(event.template)} for "
                                  f"{event.device} in {event.seconds:.2f} s"
                                  f"{'' if event.stored else ' (disk cache off)'}\n")
                self.stream.flush()

    def restart(self, label: str) -> None:
        """End the line (if open) and count from zero under a new `label` (a new step)."""
        with self._lock:
            self.end_line()
            self.label, self.built, self.seconds = label, 0, 0.0

    def _building_seconds(self, now: float) -> float:
        """Compile time so far: the finished builds' plus the longest running one's."""
        running = max((now - start for _, start in self._active.values()), default=0.0)
        return self.seconds + running

    def line(self, now: float | None = None) -> str:
        """The text of the line at time `now` (default: the current time)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            text = (f"{self.label + ': ' if self.label else ''}building kernels: "
                    f"{self.built} built {format_duration(self._building_seconds(now))}")
            if not self.label:          # a label (a warmup's step) has said what runs where
                text += (f" (first run on {self.device}, cached afterwards)" if self.stored
                         else f" (on {self.device}; disk cache off: built again next run)")
            elif not self.stored:
                text += " (disk cache off)"
            if self._active:   # the longest-running build's template (cut first when narrow)
                text += ": " + _short_template(min(self._active.values(),
                                                   key=lambda entry: entry[1])[0])
            return text

    def _draw(self, now: float) -> None:
        if not self._line_open:
            _open_build_line.append(self)
            self._line_open = True
        text = self.line(now)
        if is_terminal(self.stream):
            text = text[:max(shutil.get_terminal_size().columns - 1, 20)]
        padding = " " * max(self._last_width - len(text), 0)
        self.stream.write("\r" + text + padding)
        self.stream.flush()
        self._last_width = len(text)

    def end_line(self) -> None:
        """Draw the line's last state and end it (nothing when none is open)."""
        with self._lock:
            if not self._line_open:
                return
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False
            self._last_width = 0
            if self in _open_build_line:
                _open_build_line.remove(self)

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="clpatch-build-progress",
                                            daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            with self._lock:
                if self._active:
                    if self._line_open or self._building_seconds(now) >= self.delay:
                        self._draw(now)
                elif self._line_open and now - self._last_end >= self.interval:
                    self.end_line()

    def close(self) -> None:
        """Stop redrawing and end the line if one is open; idempotent."""
        self._stop.set()
        ticker = self._ticker
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join()
        self.end_line()


class EndsBuildLine:
    """A text stream that ends an open "building kernels" line before each write, so that
    a command's own output on the same terminal starts on a line of its own; every other
    attribute is the wrapped stream's. The command line wraps sys.stdout and sys.stderr in
    it while a `BuildProgress` draws on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        if _open_build_line and text:
            end_build_line()
        return self.wrapped.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)
