"""CURE: a coder and a unit tester co-evolve (docs/cure.md)."""

from selfplay.loops.cure.loop import CODER, TESTER, CureLoop
from selfplay.loops.cure.settings import CureSettings

__all__ = ["CODER", "TESTER", "CureLoop", "CureSettings"]
