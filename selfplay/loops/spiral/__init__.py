"""SPIRAL: self-play on zero-sum games (``loop.py``: the algorithm; ``metrics.py``: records)."""

from selfplay.loops.spiral.loop import ROLE, GameSpec, SpiralLoop, SpiralSettings, seat_role
from selfplay.loops.spiral.metrics import GameRecord, Seat

__all__ = ["ROLE", "GameRecord", "GameSpec", "Seat", "SpiralLoop", "SpiralSettings", "seat_role"]
