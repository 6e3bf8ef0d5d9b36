"""Where selfplay keeps what it builds once and reuses (converted models, corpora), and the
folders a user names (a run folder) made with one clear error when they cannot be."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from selfplay.core.errors import UserError


def cache_root() -> Path:
    """``SELFPLAY_CACHE``, else ``~/.cache/selfplay`` (models in ``models/``, corpora in
    ``corpora/``)."""
    return Path(os.environ.get("SELFPLAY_CACHE", Path.home() / ".cache" / "selfplay"))


def make_folder(path: Path, what: str, exist_ok: bool = False) -> None:
    """``path`` and its missing parents, or a one-line ``UserError`` naming ``what`` (the setting
    that named the folder) and why it cannot be made: ``/proc/nope``, a path under a file, a
    read-only disk. Parents made before the failure are removed again: nothing is left behind."""
    missing = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except OSError as exc:
        for made in missing:
            with contextlib.suppress(OSError):  # never made, or not empty: not ours to remove
                made.rmdir()
        raise UserError(f"{what}: cannot create {exc.filename or path}: {exc.strerror}") from exc
