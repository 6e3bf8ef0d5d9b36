"""SPIRAL: self-play on zero-sum games (``loop.py``: the algorithm; ``records.py``: game records
and metrics)."""

from selfplay.loops.spiral.loop import ROLE, GameSpec, SpiralLoop, SpiralSettings, seat_role
from selfplay.loops.spiral.records import GameRecord, Seat

__all__ = ["ROLE", "GameRecord", "GameSpec", "Seat", "SpiralLoop", "SpiralSettings", "seat_role"]
