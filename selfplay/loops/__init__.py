"""The loops: one file each (rlvr, spiral, agent0, spice), looked up by the name configs use.

``LOOPS`` maps a loop name to ``"module:Class"``; classes are imported only when a run uses them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from selfplay.errors import UserError

if TYPE_CHECKING:
    from selfplay.config import ExperimentConfig
    from selfplay.loops.base import Loop

LOOPS: dict[str, str] = {
    "rlvr": "selfplay.loops.rlvr:RlvrLoop",
    "spiral": "selfplay.loops.spiral:SpiralLoop",
    "agent0": "selfplay.loops.agent0:Agent0Loop",
    "spice": "selfplay.loops.spice:SpiceLoop",
}


def register_loop(name: str, target: str | type) -> None:
    """Make ``loop: name`` available to configs (``target``: a class or ``"module:Class"``)."""
    LOOPS[name] = target if isinstance(target, str) else f"{target.__module__}:{target.__name__}"


def loop_class(name: str) -> type[Loop]:
    target = LOOPS.get(name)
    if target is None:
        raise UserError(f"unknown loop {name!r} (known: {', '.join(sorted(LOOPS))})")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def make_loop(config: ExperimentConfig) -> Loop:
    return loop_class(config.loop)(config)
