"""`python -m clpatch ...`: the same as the `clpatch` command."""

from .cli.main import main

raise SystemExit(main())
