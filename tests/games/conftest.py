"""Shared setup for the games tests."""

from __future__ import annotations

import sys
from pathlib import Path

# Let `import games` work from a plain `pytest` run before the package is installed.
REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
