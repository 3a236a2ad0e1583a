"""The error type of image and video files, and the one-line messages built from other errors."""

from __future__ import annotations


class ImageFileError(ValueError):
    """A file that cannot be read or written as an image; the message starts with its path."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
