"""A one-line progress bar for long command-line runs (denoising the frames of a video).

`Progress` redraws a single line with a carriage return: the label, a bar, done/total, the
elapsed time, the rate and an estimate of the time left (without a total: the count and the
rate only). It draws only on terminals unless told otherwise, so logs and pipes stay clean,
and at most every `min_interval` seconds, except for the last update and on close, which
also ends the line.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from types import TracebackType
from typing import TextIO

BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    """'mm:ss', or 'h:mm:ss' from an hour on; '--:--' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _isatty(stream: TextIO) -> bool:
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
        self.enabled = _isatty(self.stream) if enabled is None else enabled
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
        text = self.line(now)
        if _isatty(self.stream):  # keep to one terminal line, or "\r" cannot redraw it
            text = text[:max(shutil.get_terminal_size().columns - 1, 20)]
        padding = " " * max(self._last_width - len(text), 0)  # clear a longer previous line
        self.stream.write("\r" + text + padding)
        self.stream.flush()
        self._last_width = len(text)
        self._last_draw = now
