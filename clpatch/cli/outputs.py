"""The output rule of every command that writes files, as the command line applies it.

Every refusal here is a `UsageError` (exit 2: before any work); a report that cannot be
written, or a failure inside `Writing`, a `CommandError` (exit 1).

- `check_npz`: an archive's name ends in .npz; `check_format`: an image can be written in
  the format its name says (.png, .tif/.tiff, .jpg/.jpeg, .webp, .bmp, .npy).
- `check_outputs` runs before any work: an output may not be one of the inputs (the same file,
  also through symlinks and hard links) nor another output, its folder must exist and be
  writable, it may not be a directory (except a video's directory of frames), and an existing
  file, or a non-empty directory of frames, is replaced only with `--overwrite`.
- `Writing` wraps the work that ends in writing the outputs (each written through a temporary
  beside it, see `clpatch.io.outputs`): a Ctrl-C or an error there is reported as one
  `clpatch: error:` line saying which outputs were not written and that the previous files are
  untouched (exit code 130 for Ctrl-C).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import TracebackType

import pyopencl as cl

from ..core.errors import ClpatchError
from ..io.images import ImageFileError, ImageInfo, output_format
from ..io.outputs import OutputError, TemporaryOutput, check_output, same_file
from ..io.video import output_kind
from .common import EXIT_FAILURE, CommandError, UsageError, first_line

OVERWRITE_OPTION = "--overwrite"
INTERRUPTED_CODE = 130  # the shell's code for a process stopped by SIGINT
# What `clpatch.cli.main` reports as one error line; anything else keeps its traceback.
REPORTED = (CommandError, ClpatchError, ValueError, TypeError, OSError, LookupError, cl.Error)


def check_npz(path: str | None, option: str = "--output") -> None:
    """An archive output must say what it is: a UsageError naming `option` unless `path`
    (None: not asked for) ends in .npz (numpy.savez writes what it is given, so `-o res.txt`
    wrote an archive named res.txt)."""
    if path and not path.lower().endswith(".npz"):
        raise UsageError(f"{option} {path}: the result is a NumPy .npz archive; give a "
                         "name ending in .npz")


def check_outputs(outputs: Sequence[str | None], *, inputs: Sequence[str | None] = (),
                  overwrite: bool = False, video: bool = False) -> None:
    """Fail with a UsageError naming the path, before any work, when one of `outputs`
    (None: not asked for) must not or cannot be written (see the module doc). `video`: the
    outputs are videos, directories of frames unless their name says otherwise."""
    given = [path for path in outputs if path]
    for k, path in enumerate(given):
        for other in given[:k]:
            if same_file(path, other):
                raise UsageError(f"{path}: is also {other}; give each output its own path")
        try:
            directory = video and output_kind(path) == "directory"
            check_output(path, inputs=inputs, overwrite=overwrite, directory=directory,
                         overwrite_option=OVERWRITE_OPTION)
        except OutputError as exc:
            raise UsageError(str(exc)) from None


def check_format(path: str | None, info: ImageInfo) -> None:
    """Before any work: a UsageError when the image `path` (None: not asked for) cannot be
    written with `info`'s depth and mode (its extension; JPEG, WebP and BMP hold 8 bits,
    JPEG and BMP no alpha; float TIFF needs tifffile): see `clpatch.io.images.output_format`.
    Where it may be written is `check_outputs`' business."""
    if path is not None:
        try:
            output_format(path, info)
        except ImageFileError as exc:
            raise UsageError(str(exc)) from None


def check_report(path: str | None) -> None:
    """Before any work: a report file (`--json`; None: not asked for) can be written where it
    is named (its folder exists and is writable, it is not a directory). An existing report
    is replaced: reports are regenerated, never inputs."""
    if path:
        try:
            check_output(path, overwrite=True)
        except OutputError as exc:
            raise UsageError(str(exc)) from None


def write_report(path: str, text: str) -> None:
    """Write a report file whole: through a temporary beside it, renamed into place, so an
    interrupted write leaves the previous report (if any) untouched."""
    try:
        with TemporaryOutput(path) as output:
            output.temporary.write_text(text)
    except OSError as exc:
        raise CommandError(f"{path}: cannot write the report ({first_line(exc)})") from None


class Writing:
    """Wraps the work that ends in writing `paths` (None: not asked for); call `written(path)`
    once a path is in place. A KeyboardInterrupt or a reported error inside becomes a
    CommandError whose line ends with what happened to the outputs not yet written (its exit
    status a CommandError's own, else EXIT_FAILURE; 130 for Ctrl-C); other
    exceptions get that said on stderr and go on (with their traceback)."""

    def __init__(self, *paths: str | None) -> None:
        self.pending = [path for path in paths if path]
        self._existed = {path: os.path.lexists(path) for path in self.pending}

    def __enter__(self) -> Writing:
        return self

    def written(self, path: str | None) -> None:
        """`path` is complete and in place: no longer in the report of a later failure."""
        if path in self.pending:
            self.pending.remove(path)

    def outcome(self) -> str:
        """'OUT was not written; the previous file is untouched' for the pending outputs."""
        parts = []
        for path in self.pending:
            if not self._existed[path]:
                parts.append(f"{path} was not written")
            elif os.path.isdir(path):
                parts.append(f"{path} was not written; the directory is untouched")
            else:
                parts.append(f"{path} was not written; the previous file is untouched")
        return "; ".join(parts)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None or not self.pending:
            return
        if isinstance(exc, KeyboardInterrupt):
            raise CommandError(f"interrupted: {self.outcome()}", code=INTERRUPTED_CODE) from None
        if isinstance(exc, REPORTED):
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            prefix = "OpenCL error: " if isinstance(exc, cl.Error) else ""
            message = "\n".join([f"{prefix}{lines[0]} ({self.outcome()})", *lines[1:]])
            code = exc.code if isinstance(exc, CommandError) else EXIT_FAILURE
            raise CommandError(message, code=code) from exc
        if isinstance(exc, Exception):
            print(f"clpatch: {first_line(exc)}: {self.outcome()}", file=sys.stderr)
