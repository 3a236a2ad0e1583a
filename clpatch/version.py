"""The package version (one place: the command line and the package read it)."""

__version__ = "0.1.0"
