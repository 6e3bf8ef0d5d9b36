"""Difficulty: the solver's pass rate p̂ per task or group, its histogram per step or iteration,
the share of zero-variance groups, and the p̂ a curriculum aims at against what it got
(docs/algorithms.md#samplers, #curriculum-analysis-metrics).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Group:
    """The rewards of one prompt's samples (one GRPO group) and whether each was solved."""

    step: int
    group_id: str
    rewards: tuple[float, ...]
    solved: tuple[bool, ...]

    @property
    def p_hat(self) -> float:
        return sum(self.solved) / len(self.solved)

    @property
    def zero_variance(self) -> bool:
        """All rewards equal: the group-relative advantage is zero for every sample."""
        return max(self.rewards) - min(self.rewards) < 1e-12


def solved(episode: dict, role: str | None = None) -> bool:
    """An episode counts as solved when its ``info.correct`` says so, else when its reward > 0."""
    info = episode.get("info") or {}
    if "correct" in info:
        return bool(info["correct"])
    rewards = episode.get("rewards") or {}
    values = [v for k, v in rewards.items() if role is None or k == role]
    return bool(values) and values[0] > 0


def groups_from_episodes(episodes: Iterable[dict], role: str | None = None) -> list[Group]:
    """Group a run's episodes by (step, group_id); groups of one sample are skipped (no p̂)."""
    buckets: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for episode in episodes:
        if episode.get("group_id") is None:
            continue
        buckets[(int(episode.get("step", 0)), str(episode["group_id"]))].append(episode)
    groups = []
    for (step, group_id), members in sorted(buckets.items()):
        rewards = [_reward(e, role) for e in members]
        if len(members) < 2 or any(r is None for r in rewards):
            continue
        groups.append(
            Group(step, group_id, tuple(rewards), tuple(solved(e, role) for e in members))
        )
    return groups


def _reward(episode: dict, role: str | None) -> float | None:
    rewards = episode.get("rewards") or {}
    if role is not None:
        return rewards.get(role)
    return next(iter(rewards.values()), None)


def zero_variance_share(groups: list[Group]) -> float | None:
    """Share of groups whose rewards are all equal (all right or all wrong: no signal)."""
    if not groups:
        return None
    return sum(g.zero_variance for g in groups) / len(groups)


def phat_histogram(p_hats: Iterable[float], bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of p̂ over [0, 1] in ``bins`` equal bins; p̂ = 1 falls in the last bin."""
    values = np.asarray([p for p in p_hats if p is not None], dtype=float)
    counts, edges = np.histogram(values, bins=bins, range=(0.0, 1.0))
    return edges, counts


def histograms_by(
    items: Iterable[tuple[int, float]], bins: int = 10
) -> dict[int, np.ndarray]:
    """p̂ histogram counts per key (step or iteration) from (key, p̂) pairs."""
    per: dict[int, list[float]] = defaultdict(list)
    for key, p in items:
        if p is not None:
            per[key].append(p)
    return {key: phat_histogram(values, bins)[1] for key, values in sorted(per.items())}


def band_share(p_hats: Iterable[float], low: float, high: float) -> float | None:
    """Share of p̂ inside the target band [low, high]."""
    values = [p for p in p_hats if p is not None]
    if not values:
        return None
    return sum(low <= p <= high for p in values) / len(values)


# Where a loop's difficulty target lives in its config section, and the paper defaults.
DEFAULT_TARGETS = {"agent0": (0.3, 0.8), "spice": (0.5, 0.5)}
_LOW_KEYS = ("band_lo", "band_low", "p_low", "low", "min_p_hat", "lo")
_HIGH_KEYS = ("band_hi", "band_high", "p_high", "high", "max_p_hat", "hi")


def target_band(config: dict) -> tuple[float, float, str] | None:
    """(low, high, where it came from): the p̂ band the run's curriculum aims at.

    Looked up in the loop's config section (a ``band: [lo, hi]`` list; Agent0's ``band: paper``
    with ``band_delta`` or ``band: code`` with ``band_lo``/``band_hi``; ``p_low``/``p_high``
    style keys; or a ``target`` scalar, at any depth), else the paper's default for the loop
    (Agent0 keeps 0.3 ≤ p̂ ≤ 0.8; SPICE's variance reward peaks at p̂ = ½); None otherwise.
    """
    loop = config.get("loop")
    section = config.get(loop) if isinstance(config.get(loop), dict) else None
    found = _search_band(section) if section else None
    if found:
        return (*found, f"{loop} config")
    if loop in DEFAULT_TARGETS:
        return (*DEFAULT_TARGETS[loop], f"{loop} paper default")
    return None


def _search_band(node) -> tuple[float, float] | None:
    if not isinstance(node, dict):
        return None
    band = node.get("band")
    if isinstance(band, list | tuple) and len(band) == 2:
        return float(band[0]), float(band[1])
    if band == "paper" and isinstance(node.get("band_delta"), int | float):  # Agent0 paper
        return 0.5 - node["band_delta"], 0.5 + node["band_delta"]
    low = next((node[k] for k in _LOW_KEYS if isinstance(node.get(k), int | float)), None)
    high = next((node[k] for k in _HIGH_KEYS if isinstance(node.get(k), int | float)), None)
    if low is not None and high is not None:
        return float(low), float(high)
    target = node.get("target_p_hat", node.get("target"))
    if isinstance(target, int | float) and 0 <= target <= 1:
        return float(target), float(target)
    for child in node.values():
        found = _search_band(child)
        if found:
            return found
    return None
