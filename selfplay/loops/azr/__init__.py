"""Absolute Zero Reasoner (``loop.py``: the algorithm; ``settings.py``: its config section;
``tasks.py``: tasks, buffers and sandbox checks; ``records.py``: metrics and records)."""

from selfplay.loops.azr.loop import AzrLoop
from selfplay.loops.azr.settings import AzrSettings

__all__ = ["AzrLoop", "AzrSettings"]
