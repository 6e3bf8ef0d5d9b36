"""Where selfplay keeps what it builds once and reuses: converted models, corpora."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``SELFPLAY_CACHE``, else ``~/.cache/selfplay`` (models in ``models/``, corpora in
    ``corpora/``)."""
    return Path(os.environ.get("SELFPLAY_CACHE", Path.home() / ".cache" / "selfplay"))
