"""Search Self-Play: a proposer and a solver that both search a corpus (``loop.py``: the
algorithm; ``settings.py``: its config section; ``targets.py``: the answers questions are
written for; ``retrieval.py``: the RAG check; ``records.py``: metrics and records)."""

from selfplay.loops.ssp.loop import JUDGE, PROPOSER, SOLVER, SspLoop
from selfplay.loops.ssp.settings import SspSettings

__all__ = ["JUDGE", "PROPOSER", "SOLVER", "SspLoop", "SspSettings"]
