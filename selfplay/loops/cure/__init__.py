"""CURE: a coder and a unit tester co-evolve (``loop.py``: the algorithm; ``settings.py``: its
config section; ``execution.py``: the sandbox runs; ``records.py``: metrics and records)."""

from selfplay.loops.cure.loop import CODER, TESTER, CureLoop
from selfplay.loops.cure.settings import CureSettings

__all__ = ["CODER", "TESTER", "CureLoop", "CureSettings"]
