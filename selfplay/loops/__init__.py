"""The loops, looked up by the name configs use, and the experiment config they complete.

``LOOPS`` maps a built-in name to ``"module:Class"``; classes are imported only when a run uses
them. A config may also name a loop the package does not ship (docs/extending.md): by import
path, ``loop: my_pkg.loop:MyLoop``, or by the name an installed package registers in the
``selfplay.loops`` entry-point group. Built-in and plug-in loops are then treated alike: the
class's ``name`` is the key of its own config section and its ``Settings`` model checks that
section (``validate``), with the same one-line errors as the rest of the config.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from selfplay import config_files as experiment
from selfplay.config import ExperimentConfig, LoopSection
from selfplay.core import plugins
from selfplay.core.errors import UserError

if TYPE_CHECKING:
    from selfplay.loops.base import Loop

LOOPS: dict[str, str] = {
    "rlvr": "selfplay.loops.rlvr:RlvrLoop",
    "spiral": "selfplay.loops.spiral:SpiralLoop",
    "agent0": "selfplay.loops.agent0:Agent0Loop",
    "spice": "selfplay.loops.spice:SpiceLoop",
    "azr": "selfplay.loops.azr:AzrLoop",
    "cure": "selfplay.loops.cure:CureLoop",
    "mae": "selfplay.loops.mae:MaeLoop",
    "ssp": "selfplay.loops.ssp:SspLoop",
    "sqlm": "selfplay.loops.sqlm:SqlmLoop",
    "spell": "selfplay.loops.spell:SpellLoop",
    "verifiers": "selfplay.loops.verifiers:VerifiersLoop",
}


def register_loop(name: str, target: str | type) -> None:
    """Make ``loop: name`` available to configs (``target``: a class or ``"module:Class"``)."""
    LOOPS[name] = target if isinstance(target, str) else f"{target.__module__}:{target.__name__}"


def known_loops() -> list[str]:
    """Built-in names, then the names installed packages register as entry points."""
    return sorted(LOOPS) + [n for n in plugins.entry_point_names(plugins.LOOPS) if n not in LOOPS]


def loop_class(name: str) -> type[Loop]:
    """The class ``loop: name`` means: a registered name, an import path, or an entry point."""
    target = LOOPS.get(name)
    if target is not None:
        module, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    elif plugins.resolvable(name, plugins.LOOPS):
        cls = plugins.load_object(name, plugins.LOOPS, what="loop")
    else:
        raise UserError(
            f"unknown loop {name!r} (known: {', '.join(known_loops())}; or name a class as "
            "'module:Class')"
        )
    from selfplay.loops.base import Loop, LoopSettings  # heavier than this registry

    if not (isinstance(cls, type) and issubclass(cls, Loop)):
        raise UserError(f"loop {name!r} is not a subclass of selfplay.loops.base.Loop")
    if cls.Settings is not None and not issubclass(cls.Settings, LoopSettings):
        raise UserError(f"loop {name!r}: its Settings must subclass "
                        "selfplay.loops.base.LoopSettings (the runner reads eval_every from it)")
    return cls


def loop_section(name: str) -> LoopSection:
    """The config key and settings model of the loop ``name`` (its class's ``name`` and
    ``Settings``)."""
    cls = loop_class(name)
    if cls.Settings is None:
        return LoopSection(None, None)
    return LoopSection(cls.name, cls.Settings)


def validate(data: dict, source: str) -> ExperimentConfig:
    """An experiment config from a mapping: the shared sections and the loop's own section."""
    return experiment.parse(data, source, loop_section)


def load_experiment(name_or_path: str, overrides: list[str] | None = None) -> ExperimentConfig:
    """``experiments/NAME.yaml`` or a YAML path, with dotted ``key=value`` overrides."""
    return experiment.load(name_or_path, overrides, loop_section)


def make_loop(config: ExperimentConfig) -> Loop:
    """The experiment's loop; a role or prompt that does not match it fails here in one line."""
    return loop_class(config.loop)(config)
