"""The rule every file clpatch writes follows: check the place before any work
(`check_output`), then write to a temporary beside the target and rename it into place only
when it is complete (`TemporaryOutput`).

So an interrupted or failed write (Ctrl-C, an exception, a full disk) leaves the previous file,
if any, untouched and nothing that looks like a result: temporaries are hidden files (or
directories) named ``.<target name>.<random>.partial<suffix>`` in the target's own folder, so
the final rename is atomic and a directory of frames never lists them (hidden files are not
frames). A process killed outright (SIGKILL, a crash of the driver) can leave such a temporary
behind, never a half-written target.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

from .errors import ImageFileError, first_line

__all__ = ["PARTIAL", "OutputError", "TemporaryOutput", "check_output", "same_file"]

PARTIAL = ".partial"  # in the name of every temporary (before the target's suffix)


class OutputError(ImageFileError):
    """An output that cannot or must not be written; the message starts with its path."""


def same_file(path: str | Path, other: str | Path) -> bool:
    """Whether `path` and `other` name the same file or directory: `os.path.samefile` when
    both exist (symlinks and hard links included), else their resolved paths compared."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return os.path.realpath(path) == os.path.realpath(other)


def check_output(path: str | Path, *, inputs: Iterable[str | Path | None] = (),
                 overwrite: bool = False, directory: bool = False,
                 overwrite_option: str = "overwrite=True") -> Path:
    """Fail with OutputError, before any work, when `path` cannot or must not be written.

    Refused: one of `inputs` (the same file, also through symlinks and hard links); a folder
    that does not exist or is not writable; an existing directory, unless `directory` (an
    output that is a directory of frames); for `directory`, an existing non-directory; an
    existing file or non-empty directory, unless `overwrite` (`overwrite_option` is how the
    caller names that permission in the message). Returns the target with symlinks resolved:
    where the result will be written.
    """
    for source in inputs:
        if source is not None and same_file(path, source):
            raise OutputError(f"{path}: is the input {source}; write the result elsewhere")
    target = Path(os.path.realpath(path))
    folder = target.parent
    if not folder.is_dir():
        raise OutputError(f"{path}: cannot write here: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write here: the folder {folder} is not writable")
    if target.is_dir():
        if not directory:
            raise OutputError(f"{path}: is a directory; name a file to write")
        if not os.access(target, os.W_OK | os.X_OK):
            raise OutputError(f"{path}: cannot write here: the directory is not writable")
        if not overwrite and any(target.iterdir()):
            raise OutputError(f"{path}: the output directory is not empty; choose an empty or "
                              f"new one, or pass {overwrite_option} to replace its frames")
    elif target.exists():
        if directory:
            raise OutputError(f"{path}: exists and is not a directory")
        if not overwrite:
            raise OutputError(f"{path}: already exists; pass {overwrite_option} to replace it")
    return target


class TemporaryOutput:
    """A temporary file (or directory) beside `path`, renamed into place when complete.

    `temporary` is created at once in the folder of `path` (symlinks followed, so a link to
    a file gets its target replaced), with the mode a new file would get, or the mode of the
    file it replaces. `commit()` renames it into place (`os.replace`, atomic); for a
    directory output onto an existing directory, the entries of the temporary directory are
    moved in one by one, after moving out the entries `stale` picks (default: those the new
    ones replace), and everything moved is moved back if one rename fails. `discard()`
    removes the temporary. As a context manager it commits on success and discards on any
    exception, KeyboardInterrupt included, which it lets through.
    """

    def __init__(self, path: str | Path, *, directory: bool = False,
                 stale: Callable[[Path], bool] | None = None) -> None:
        self.path = Path(path)
        self.target = Path(os.path.realpath(self.path))
        self.directory = directory
        self._stale = stale
        self._done = False
        suffix = PARTIAL if directory else PARTIAL + self.target.suffix
        for _ in range(100):
            name = f".{self.target.name}.{secrets.token_hex(4)}{suffix}"
            temporary = self.target.parent / name
            try:
                if directory:
                    os.mkdir(temporary, 0o777)  # the umask applies, as to any new directory
                else:
                    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise OSError(f"{self.path}: cannot write here ({first_line(exc)})") from None
        else:
            raise OSError(f"{self.path}: cannot create a temporary file beside it")
        self.temporary = temporary
        if not directory and self.target.is_file():
            with contextlib.suppress(OSError):
                os.chmod(temporary, stat.S_IMODE(self.target.stat().st_mode))

    def __enter__(self) -> TemporaryOutput:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.commit()
        else:
            self.discard()

    @property
    def done(self) -> bool:
        """Whether the temporary was committed or discarded."""
        return self._done

    def commit(self) -> None:
        """Put the temporary in place of the target (see the class doc); on failure the
        temporary is removed and the target left as it was."""
        if self._done:
            return
        try:
            if self.directory and self.target.is_dir():
                self._merge()
            else:
                os.replace(self.temporary, self.target)
        except BaseException:
            self.discard()
            raise
        self._done = True

    def discard(self) -> None:
        """Remove the temporary; the target is left as it was."""
        if self._done:
            return
        self._done = True
        if self.directory:
            shutil.rmtree(self.temporary, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temporary)

    def _merge(self) -> None:
        new = sorted(self.temporary.iterdir())
        names = {entry.name for entry in new}
        stale = self._stale or (lambda entry: entry.name in names)
        trash = self.target.parent / f".{self.target.name}.{secrets.token_hex(4)}.old"
        os.mkdir(trash, 0o700)
        moves: list[tuple[Path, Path]] = []
        try:
            for entry in sorted(self.target.iterdir()):
                if stale(entry):
                    os.replace(entry, trash / entry.name)
                    moves.append((entry, trash / entry.name))
            for entry in new:
                if os.path.lexists(self.target / entry.name):
                    raise OutputError(f"{self.path}: {entry.name} is there already and is not "
                                      "one of the files this output replaces")
                os.replace(entry, self.target / entry.name)
                moves.append((entry, self.target / entry.name))
        except BaseException:
            for source, moved in reversed(moves):
                with contextlib.suppress(OSError):
                    os.replace(moved, source)
            with contextlib.suppress(OSError):
                trash.rmdir()  # only when everything went back
            raise
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(self.temporary, ignore_errors=True)
