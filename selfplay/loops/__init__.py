"""The loops: one file each (rlvr, spiral, ...), registered by the name configs use."""

from __future__ import annotations

from selfplay.config import ExperimentConfig


def make_loop(config: ExperimentConfig):
    if config.loop == "rlvr":
        from selfplay.loops.rlvr import RlvrLoop

        return RlvrLoop(config)
    if config.loop == "spiral":
        from selfplay.loops.spiral import SpiralLoop

        return SpiralLoop(config)
    raise ValueError(f"unknown loop {config.loop!r}")
