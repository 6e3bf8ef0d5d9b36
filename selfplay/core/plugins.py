"""Plug-ins: games, loops and proposer rewards from a user's own module, without editing selfplay.

A config names a plug-in in one of two ways:

- an import path ``"package.module:attr"`` (``id: my_games.nim:Nim``, ``loop: my_pkg.loop:MyLoop``);
  the module is imported from ``sys.path``, to which the experiment file's folder and the current
  directory are appended (``add_search_path``), so a module next to the experiment file, or
  next to where you run ``selfplay``, is found; a run folder's pinned copies
  (``RUN/inputs/plugins``) come first (``pin``);
- a name registered as a Python entry point by an installed package, in the group
  ``selfplay.games``, ``selfplay.loops`` or ``selfplay.rewards``::

      [project.entry-points."selfplay.games"]
      nim = "my_games.nim:Nim"

Built-in names are looked up by their registries first (``games.registry``,
``selfplay.loops.LOOPS``, the reward names in ``curricula``); this module only resolves the rest.
It imports nothing heavy so that leaf packages (``games``, ``curricula``) can use it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from typing import Any

from selfplay.core.errors import UserError

GAMES = "selfplay.games"
LOOPS = "selfplay.loops"
REWARDS = "selfplay.rewards"
GROUPS = (GAMES, LOOPS, REWARDS)


def is_import_path(spec: str) -> bool:
    """True for ``"module:attr"`` (a dotted module, a colon, a dotted attribute)."""
    module, sep, attr = spec.partition(":")
    return bool(sep and module and attr) and all(
        part.isidentifier() for part in [*module.split("."), *attr.split(".")]
    )


def entry_point_names(group: str) -> list[str]:
    """Names the installed packages register in ``group``."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=group)})


def find_entry_point(name: str, group: str) -> importlib.metadata.EntryPoint | None:
    matches = [ep for ep in importlib.metadata.entry_points(group=group) if ep.name == name]
    return matches[0] if matches else None


def add_search_path(folder: str | os.PathLike) -> None:
    """Look for plug-in modules in ``folder`` too, after everything else on ``sys.path`` (so a
    local module never shadows a library)."""
    folder = os.fspath(folder)
    if folder not in sys.path:
        sys.path.append(folder)


def pin(folder: str | os.PathLike) -> None:
    """Look for plug-in modules in ``folder`` first: a run folder's own copies of the modules it
    was started with (``RUN/inputs/plugins``) win over whatever else has the same name."""
    folder = os.fspath(folder)
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    importlib.invalidate_caches()


def import_object(spec: str, what: str = "plug-in") -> Any:
    """The object ``"module:attr"`` names; a one-line ``UserError`` if it cannot be had."""
    module_name, _, attr = spec.partition(":")
    add_search_path(os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, SyntaxError, or whatever the module raises
        raise UserError(
            f"{what} {spec!r}: cannot import {module_name} ({_first_line(exc)})"
        ) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise UserError(f"{what} {spec!r}: {module_name} has no attribute {attr!r}") from exc
    return target


def load_object(spec: str, group: str, what: str = "plug-in") -> Any:
    """What ``spec`` names: an import path ``"module:attr"``, else an entry point in ``group``.

    Raises a one-line ``UserError`` naming the spec when neither resolves.
    """
    if is_import_path(spec):
        return import_object(spec, what)
    entry_point = find_entry_point(spec, group)
    if entry_point is None:
        registered = ", ".join(entry_point_names(group)) or "none"
        raise UserError(
            f"unknown {what} {spec!r}: not a 'module:attr' import path and no entry point of "
            f"that name in group {group} (registered: {registered})"
        )
    try:
        return entry_point.load()
    except Exception as exc:
        raise UserError(
            f"{what} {spec!r}: entry point {entry_point.value!r} in group {group} does not load "
            f"({_first_line(exc)})"
        ) from exc


def resolvable(spec: str, group: str) -> bool:
    """Whether ``spec`` looks like something ``load_object`` could resolve (without importing)."""
    return is_import_path(spec) or find_entry_point(spec, group) is not None


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip().strip("*")]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
