"""SPICE: corpus-grounded challenger vs reasoner (``loop.py``: the algorithm; ``settings.py``:
its config section; ``documents.py``: how documents are drawn and questions screened)."""

from selfplay.loops.spice.loop import CHALLENGER, REASONER, SpiceLoop
from selfplay.loops.spice.settings import SpiceSettings

__all__ = ["CHALLENGER", "REASONER", "SpiceLoop", "SpiceSettings"]
