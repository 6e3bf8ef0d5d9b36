"""The ``selfplay`` command line (``main``); one module per group of commands."""

from selfplay.cli.main import main

__all__ = ["main"]
