"""The loops: one file each (rlvr, spiral, agent0, spice), looked up by the name configs use.

``LOOPS`` maps a loop name to ``"module:Class"``; classes are imported only when a run uses them.
A config may also name a loop the package does not ship (see docs/extending.md):

- by import path, ``loop: my_pkg.loop:MyLoop``;
- by the name an installed package registers in the ``selfplay.loops`` entry-point group.

A plug-in loop reads its settings from the config's free ``settings:`` section; ``loop_settings``
validates them against the loop's own pydantic model, with the same one-line errors as the rest
of the config.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ValidationError

from selfplay.core import plugins
from selfplay.core.errors import UserError

if TYPE_CHECKING:
    from selfplay.config import ExperimentConfig
    from selfplay.loops.base import Loop

LOOPS: dict[str, str] = {
    "rlvr": "selfplay.loops.rlvr:RlvrLoop",
    "spiral": "selfplay.loops.spiral:SpiralLoop",
    "agent0": "selfplay.loops.agent0:Agent0Loop",
    "spice": "selfplay.loops.spice:SpiceLoop",
}

Settings = TypeVar("Settings", bound=BaseModel)


def register_loop(name: str, target: str | type) -> None:
    """Make ``loop: name`` available to configs (``target``: a class or ``"module:Class"``)."""
    LOOPS[name] = target if isinstance(target, str) else f"{target.__module__}:{target.__name__}"


def known_loops() -> list[str]:
    """Built-in names, then the names installed packages register as entry points."""
    return sorted(LOOPS) + [n for n in plugins.entry_point_names(plugins.LOOPS) if n not in LOOPS]


def loop_class(name: str) -> type[Loop]:
    """The class ``loop: name`` means: a built-in name, an import path, or an entry point."""
    target = LOOPS.get(name)
    if target is not None:
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    if not plugins.resolvable(name, plugins.LOOPS):
        raise UserError(
            f"unknown loop {name!r} (known: {', '.join(known_loops())}; or name a class as "
            "'module:Class')"
        )
    cls = plugins.load_object(name, plugins.LOOPS, what="loop")
    from selfplay.loops.base import Loop  # the base pulls in torch-free but heavier modules

    if not (isinstance(cls, type) and issubclass(cls, Loop)):
        raise UserError(f"loop {name!r} is not a subclass of selfplay.loops.base.Loop")
    return cls


def loop_settings(model: type[Settings], config: ExperimentConfig) -> Settings:
    """The config's ``settings:`` section validated by a plug-in loop's own pydantic model.

    Call it in the loop's ``__init__``; a bad key fails in one line before a run folder exists.
    """
    try:
        return model.model_validate(config.settings)
    except ValidationError as exc:
        from selfplay.config import _one_line

        raise UserError(_one_line(exc, f"{config.name}: settings")) from exc


def make_loop(config: ExperimentConfig) -> Loop:
    return loop_class(config.loop)(config)
