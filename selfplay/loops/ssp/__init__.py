"""Search Self-Play: a proposer and a solver that both search a corpus (``loop.py``: the
algorithm and its records; ``settings.py``: its config section)."""

from selfplay.loops.ssp.loop import JUDGE, PROPOSER, SOLVER, SspLoop
from selfplay.loops.ssp.settings import SspSettings

__all__ = ["JUDGE", "PROPOSER", "SOLVER", "SspLoop", "SspSettings"]
