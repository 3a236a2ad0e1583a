"""`python -m clpatch ...`: the same as the `clpatch` command."""

from .cli.main import entry

entry()
