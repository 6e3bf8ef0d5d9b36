"""SPICE: corpus-grounded challenger vs reasoner (``loop.py``: the algorithm; ``documents.py``:
the corpus side; ``records.py``: metrics and records)."""

from selfplay.loops.spice.loop import CHALLENGER, REASONER, SpiceLoop, SpiceSettings

__all__ = ["CHALLENGER", "REASONER", "SpiceLoop", "SpiceSettings"]
