"""Multi-Agent Evolve (``loop.py``: the algorithm; ``settings.py``: its config section;
``pool.py``: the question pool; ``records.py``: judgments, metrics and records)."""

from selfplay.loops.mae.loop import MaeLoop
from selfplay.loops.mae.settings import MaeSettings

__all__ = ["MaeLoop", "MaeSettings"]
