"""`python -m clpatch ...`: the same as the `clpatch` command."""

from .cli import main

raise SystemExit(main())
