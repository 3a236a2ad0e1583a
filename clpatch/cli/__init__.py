"""The command line: one module per command, `main.py` assembles them."""
