"""A step of draws as a loop makes them (``curricula/curriculum.py``), for the sampler tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from curricula.curriculum import Curriculum, Group


def fill(
    curriculum: Curriculum, n: int, step: int, play: Callable[[np.ndarray], list[Group]]
) -> list[Group]:
    """Draw n tasks, play them, report the outcomes; draw again for the groups not kept."""
    kept: list[Group] = []
    tasks = curriculum.draw(n, step)
    while len(tasks):
        kept += curriculum.report(play(tasks), step)
        tasks = curriculum.redraw(n - len(kept), step)
    return kept
