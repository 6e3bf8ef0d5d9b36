"""JSONL files a user hands us (evaluation suites, judge calibration, contamination lists):
read strictly, so a bad line is one clear error naming the file and the line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from selfplay.core.errors import UserError


def read_rows(path: str | Path, what: str = "file") -> Iterator[tuple[int, dict]]:
    """(line number, row) for every non-empty line of ``path``, each a JSON object.

    Raises a one-line ``UserError`` for a missing file, a line that is not JSON or a row that is
    not an object; ``what`` names the file's role in the first of those ("suite file", ...)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"{what} {file} does not exist")
    # lines end at "\n" only: JSON leaves U+2028 and U+0085 unescaped inside strings, and
    # str.splitlines() would cut a row there
    for number, line in enumerate(file.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{file}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise UserError(f"{file}:{number}: a row must be a JSON object")
        yield number, row
