"""Advantage estimators, always per role (docs/algorithms.md: #advantages, #rae, #adpo).

- Group-relative: GRPO (mean/std), Dr. GRPO (mean only), RLOO (Dr. GRPO × G/(G−1)).
  Groups are (group_id, role): roles never share a baseline.
- RAE (SPIRAL): an EMA baseline per (env, role), shared by every worker and saved in checkpoints.
- ADPO (Agent0, code form): per-sample advantage scale s(p̂) and clip ceiling ε_high(p̂).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Literal

from selfplay.types import Episode, Sample

GroupMode = Literal["grpo", "drgrpo", "rloo", "reinforce"]
STD_EPS = 1e-6


def group_advantages(rewards: list[float], mode: GroupMode) -> list[float]:
    """Advantages of one group of G rewards.

    grpo:   (r − mean) / (std + ε), population std (as in the GRPO paper's code).
    drgrpo: r − mean (Dr. GRPO: no std division, which favours too-easy/too-hard prompts).
    rloo:   (r − mean) · G/(G−1), the leave-one-out estimator r_i − mean_{j≠i} r_j.
    reinforce: r (no baseline).
    """
    if mode == "reinforce":
        return list(rewards)
    g = len(rewards)
    mean = sum(rewards) / g
    centred = [r - mean for r in rewards]
    if mode == "drgrpo":
        return centred
    if mode == "rloo":
        return [0.0] * g if g < 2 else [c * g / (g - 1) for c in centred]
    if mode == "grpo":
        std = (sum(c * c for c in centred) / g) ** 0.5
        return [c / (std + STD_EPS) for c in centred]
    raise ValueError(f"unknown group advantage mode {mode!r}")


class RAEBaseline:
    """Role-conditioned advantage estimation: b[env, role] ← α·b + (1−α)·R, A = R − b.

    ``order="paper"`` (SPIRAL paper, default) updates the baseline first and then subtracts it;
    ``order="code"`` (the released spiral-rl code) reads the baseline before updating it.
    Unlike the released code, one table is keyed by (env, role) and shared by all workers.
    """

    def __init__(self, alpha: float = 0.95, order: Literal["paper", "code"] = "paper") -> None:
        if order not in ("paper", "code"):
            raise ValueError(f"RAE order must be 'paper' or 'code', not {order!r}")
        self.alpha = alpha
        self.order = order
        self.values: dict[tuple[str, str], float] = defaultdict(float)

    def advantage(self, env: str, role: str, reward: float) -> float:
        key = (env, role)
        before = self.values[key]
        self.values[key] = self.alpha * before + (1 - self.alpha) * reward
        return reward - (self.values[key] if self.order == "paper" else before)

    def state_dict(self) -> dict:
        return {
            "alpha": self.alpha,
            "order": self.order,
            "values": [[env, role, v] for (env, role), v in self.values.items()],
        }

    def load_state_dict(self, state: dict) -> None:
        self.alpha, self.order = state["alpha"], state["order"]
        self.values = defaultdict(float, {(e, r): v for e, r, v in state["values"]})


def adpo_scale(pass_rate: float, floor: float = 0.6) -> float:
    """ADPO advantage scale s(p̂) = m + (1−m)·clip((p̂−0.3)/0.5, 0, 1), m = 0.6 (Agent0 code)."""
    return floor + (1 - floor) * min(max((pass_rate - 0.3) / 0.5, 0.0), 1.0)


def adpo_eps_high(pass_rate: float) -> float:
    """ADPO clip ceiling ε_high(p̂) = 0.2 + 0.1·clip((0.8−p̂)/0.5, 0, 1) (Agent0 code)."""
    return 0.2 + 0.1 * min(max((0.8 - pass_rate) / 0.5, 0.0), 1.0)


def _role_turns(episode: Episode, role: str):
    return [turn for turn in episode.turns if turn.role == role]


def group_relative_samples(
    episodes: Iterable[Episode],
    mode: GroupMode = "grpo",
    advantages_of: Callable[[list[float]], list[float]] | None = None,
) -> list[Sample]:
    """Every turn of role p in an episode gets that episode's advantage for p, computed against
    the other episodes of the same (group_id, role): by ``mode``, or by a loop's own
    ``advantages_of`` (CURE's standardisation)."""
    groups: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for episode in episodes:
        for role in episode.rewards:
            groups[(episode.group_id, role)].append(episode)
    samples = []
    for (group_id, role), members in groups.items():
        rewards = [e.rewards[role] for e in members]
        advantages = advantages_of(rewards) if advantages_of else group_advantages(rewards, mode)
        for episode, advantage in zip(members, advantages, strict=True):
            samples += [
                _sample(turn, advantage, group_id, episode) for turn in _role_turns(episode, role)
            ]
    return samples


def rae_samples(episodes: Iterable[Episode], baseline: RAEBaseline) -> list[Sample]:
    """SPIRAL: each finished game updates b[game, role]; every turn of role p gets A_p (γ = 1)."""
    samples = []
    for episode in episodes:
        for role, reward in episode.rewards.items():
            advantage = baseline.advantage(episode.env, role, reward)
            samples += [
                _sample(turn, advantage, episode.group_id, episode)
                for turn in _role_turns(episode, role)
            ]
    return samples


def state_baseline_samples(
    episodes: Iterable[Episode], baseline: RAEBaseline, min_visits: int = 2
) -> list[Sample]:
    """RAE's samples, re-centred per state: a turn whose prompt (its role included) was seen at
    least ``min_visits`` times among the step's turns gets A = R − mean of the *other* turns'
    returns at that state (leave-one-out, so the baseline is independent of the turn's own
    action: unbiased), a Monte Carlo estimate of the state's value under the current policies;
    a rarer state keeps RAE's A = R − b[env, role] (which every game still updates).

    Against RAE's one baseline per seat, the advantages at each visited state sum to zero, so
    a step never pushes every state's likeliest move at once when a seat's returns run above
    or below its baseline (the common mode a shared policy's parameters amplify)."""
    samples = rae_samples(episodes, baseline)
    returns = {id(turn): episode.rewards[turn.role]
               for episode in episodes for turn in episode.turns if turn.role in episode.rewards}
    visits: dict[tuple, list[Sample]] = defaultdict(list)
    for sample in samples:
        visits[(sample.turn.role, tuple(sample.turn.prompt_ids))].append(sample)
    for members in visits.values():
        n = len(members)
        if n < min_visits:
            continue
        total = sum(returns[id(m.turn)] for m in members)
        for member in members:
            own = returns[id(member.turn)]
            member.advantage = own - (total - own) / (n - 1)
    return samples


def _sample(turn, advantage: float, group_id: str, episode: Episode) -> Sample:
    return Sample(
        turn=turn,
        advantage=advantage,
        group_id=group_id,
        pass_rate=episode.pass_rate,
        info={"env": episode.env},
    )


def apply_adpo(samples: list[Sample], scale_floor: float = 0.6) -> None:
    """Wire p̂ into the loss (the released Agent0 code never did): scale and ε_high per sample."""
    for sample in samples:
        if sample.pass_rate is not None:
            sample.advantage_scale = adpo_scale(sample.pass_rate, scale_floor)
            sample.eps_high = adpo_eps_high(sample.pass_rate)


def drop_zero_advantage(samples: list[Sample], tol: float = 1e-8) -> list[Sample]:
    """Zero-advantage samples carry no gradient (SPIRAL, DAPO): never send them to the learner."""
    return [s for s in samples if abs(s.advantage * s.advantage_scale) > tol]
