"""`MatcherPlan`: what the windowed search and the clustering ANN plans share, the whole-input
run (`run`, waiting for the value check) and the plan contract's `enqueue` (the check
deferred), both around the engine's own `_launch`."""

from __future__ import annotations

from typing import Any

from ..core.plans import Plan
from ..core.upload import check_peak
from ..core.volumes import Volume, as_volume, check_planned
from .matches import Matches


class MatcherPlan(Plan):
    """A matcher planned for inputs of (frames, rows, cols, channels) (`video`: a frame axis
    of the caller's; `device_output`: device arrays in and out). A subclass implements
    `_launch(volume, out, wait_for)` -> (Matches, last events), which enqueues a whole run
    and leaves its value check to the caller, and `check_limit()`."""

    frames: int
    rows: int
    cols: int
    channels: int
    video: bool
    device_output: bool

    def run(self, image: Any, *, wait_for: list[Any] | None = None) -> Matches:
        """Search `image` (the planned shape; NumPy in → NumPy out, device in → device out;
        a `clpatch.core.volumes.Volume` of it is taken as it is); waits for the value check."""
        volume = image if isinstance(image, Volume) else as_volume(image, video=self.video)
        check_planned(volume, (self.frames, self.rows, self.cols, self.channels),
                      self.device_output, self.runtime.context)
        matches, last = self._launch(volume, None, wait_for)
        check_peak(self.uploader.peak(last), self.check_limit())
        return matches

    def enqueue_arrays(self, image: Any, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`): the matches of device array
        `image` into device Matches (`out`: a Matches or (positions, distances) of the
        caller's), its value check deferred."""
        if not self.device_output:
            raise TypeError("this plan was made for NumPy arrays; make_plan's plans take both")
        matches, last = self._launch(as_volume(image, video=self.video), out, wait_for)
        self.defer_check(last, self.check_limit())
        return matches, last

    def _launch(self, volume: Volume, out: Any,
                wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        raise NotImplementedError(f"{type(self).__name__} has no _launch")

    def check_limit(self) -> float:
        raise NotImplementedError(f"{type(self).__name__} has no check_limit")
