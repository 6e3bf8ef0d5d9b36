"""The argument parser every ``selfplay`` command uses: argparse with its errors in one line."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line, like every other bad input (its default prints the whole
    usage first); ``--help`` still shows the usage. Sub-commands use the same class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")
