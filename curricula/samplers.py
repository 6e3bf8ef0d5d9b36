"""Difficulty-adaptive samplers behind one small interface (docs/algorithms.md#samplers).

A sampler turns a ``TaskBuffer`` into a choice of tasks:

- ``probabilities(buffer, step)``: the distribution it draws from (0 for retired tasks);
- ``sample(buffer, n, step, exclude=None, replace=False)``: task indices, seeded and
  deterministic (Gumbel-top-k: n draws without replacement, each ∝ its probability);
- ``keep(successes, attempts)``: whether a graded group is kept for training (DAPO filters);
- ``observe(buffer, indices, step)``: learn from the groups just recorded (TSCL's bandit);
- ``state_dict()`` / ``load_state_dict()``: the random generator and any learnt state.

Samplers (``curriculum.sampler``):

- ``uniform``: every active task alike.
- ``band``: tasks with p̂ in [lo, hi], both edges inclusive (R-Zero 0.3–0.7, Agent0 0.3–0.8);
  when fewer than n are in the band the rest are the tasks nearest to it.
- ``dapo``: uniform draws; a group is kept only when 0 < correct < G, and the loop draws again
  until the batch is full or ``dapo_max_rounds`` refill rounds are spent (``Curriculum.fill``).
- ``learnability``: priority p̂(1 − p̂); with ``learnability_oversample`` m > 1, LILO: draw m·n
  tasks uniformly and keep the n with the highest priority; m = 1 draws ∝ priority.
- ``plr``: Prioritized Level Replay (Jiang et al. 2021): over seen tasks
  P = (1 − ρ)·P_S + ρ·P_C with P_S ∝ (1/rank(S_i))^(1/β) (S = mean |advantage|, rank 1 = highest,
  ties by task order) and P_C ∝ c − C_i (steps since last drawn); an unseen task is drawn with
  probability |unseen| / |active| (PLR's replay decision), uniformly among the unseen.
- ``tscl``: Teacher-Student Curriculum Learning (Matiisen et al. 2017): a bandit over arms
  (family × difficulty level, or family), reward = the arm's score change Δx since it was last
  drawn, Q ← Q + α(Δx − Q); ε-greedy on |Q| ("online" algorithm) or Thompson-style sampling
  from the last ``tscl_window`` rewards (the paper's "sampling" algorithm); tasks uniform within
  the arm.

Every sampler honours ScaleRL's rule (``retire_at``: a task whose p̂ reaches it is never drawn
again) and an exploration prior: an unseen task counts as p̂ = ``prior_p`` (learnability, band)
and an arm never observed is tried before the others (tscl).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from curricula.buffer import TaskBuffer, level_label
from curricula.settings import SAMPLERS, CurriculumSettings


# ---------------------------------------------------------------------- drawing
def gumbel_top_k(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n indices without replacement, successively ∝ ``weights`` (zero weights never drawn).

    Successive sampling: the next task is drawn ∝ its weight among those not yet drawn. Small
    batches draw i.i.d. from the cumulative weights and skip repeats (which is exactly that
    distribution: one cumsum and n binary searches); large ones use the Gumbel-top-k trick
    (one Gumbel key per task)."""
    positive = np.flatnonzero(weights > 0)
    if n <= 0 or len(positive) == 0:
        return np.zeros(0, np.int64)
    if 8 * n <= len(positive):
        drawn = _successive_by_rejection(weights[positive], n, rng)
        if drawn is not None:
            return positive[drawn]
    keys = np.log(weights[positive]) + rng.gumbel(size=len(positive))
    top = np.argpartition(-keys, n - 1)[:n] if n < len(positive) else np.arange(len(positive))
    return positive[top[np.argsort(-keys[top], kind="stable")]]


def _successive_by_rejection(
    weights: np.ndarray, n: int, rng: np.random.Generator, max_rounds: int = 8
) -> np.ndarray | None:
    """i.i.d. draws ∝ weights, first occurrences kept, until n distinct (None if the weight
    is so concentrated that repeats keep coming: the caller falls back to Gumbel keys)."""
    cumulative = np.cumsum(weights)
    chosen: list[int] = []
    seen: set[int] = set()
    for _ in range(max_rounds):
        draws = np.searchsorted(cumulative, rng.random(2 * n) * cumulative[-1], side="right")
        for index in np.minimum(draws, len(weights) - 1).tolist():
            if index not in seen:
                seen.add(index)
                chosen.append(index)
                if len(chosen) == n:
                    return np.asarray(chosen, np.int64)
    return None


class Sampler:
    name = "uniform"
    refills = False  # DAPO: the loop draws again for the groups it threw away

    def __init__(self, settings: CurriculumSettings, seed: int = 0) -> None:
        self.settings = settings
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ the distribution
    def weights(self, buffer: TaskBuffer, step: int) -> np.ndarray:
        """Unnormalised preference over all tasks (active or not)."""
        return np.ones(len(buffer))

    def active(self, buffer: TaskBuffer, exclude: np.ndarray | None = None) -> np.ndarray:
        mask = ~buffer.retired
        if exclude is not None and len(exclude):
            mask = mask.copy()
            mask[exclude] = False
        return mask

    def probabilities(
        self, buffer: TaskBuffer, step: int, exclude: np.ndarray | None = None
    ) -> np.ndarray:
        weights = np.where(self.active(buffer, exclude), self.weights(buffer, step), 0.0)
        total = weights.sum()
        return weights / total if total > 0 else weights

    def prior_p_hat(self, buffer: TaskBuffer) -> np.ndarray:
        """Each task's p̂ for band and learnability, pooled with its arm (family × level):

        p̃_i = (n_i·p̂_i + k·p̂_arm) / (n_i + k), k = ``pool_strength`` pseudo-attempts, so a
        task seen rarely (or never: n_i = 0) leans on its level's recent pass rate; an arm never
        seen counts as p̂ = ``prior_p`` (the exploration prior). k = 0: the task's own p̂ only.
        """
        levels = buffer.arm_p_hat
        levels = np.where(np.isnan(levels), self.settings.prior_p, levels)  # small: per arm
        arm = levels[buffer.arm] if len(levels) else np.full(len(buffer), self.settings.prior_p)
        seen = buffer.attempts > 0
        k = self.settings.pool_strength
        if k <= 0:
            return np.where(seen, buffer.p_hat, arm)
        n = buffer.attempts.astype(float)
        with np.errstate(invalid="ignore"):  # unseen tasks: NaN, replaced below
            pooled = n * buffer.p_hat
            pooled += k * arm
            pooled /= n + k
        return np.where(seen, pooled, arm)

    # ------------------------------------------------------------------ drawing
    def sample(
        self,
        buffer: TaskBuffer,
        n: int,
        step: int,
        exclude: np.ndarray | None = None,
        replace: bool = False,
    ) -> np.ndarray:
        """n task indices (fewer only when the buffer has fewer tasks than n)."""
        if len(buffer) == 0 or n <= 0:
            return np.zeros(0, np.int64)
        if replace:
            return self._with_replacement(buffer, n, step, exclude)
        active = self.active(buffer, exclude)
        weights = np.where(active, self.weights(buffer, step), 0.0)
        chosen = gumbel_top_k(weights, n, self.rng)
        return self.fill(buffer, chosen, n, active, exclude)

    def _with_replacement(self, buffer, n, step, exclude) -> np.ndarray:
        probabilities = self.probabilities(buffer, step, exclude)
        if probabilities.sum() <= 0:  # everything retired: draw among all tasks
            probabilities = np.full(len(buffer), 1 / len(buffer))
        return self.rng.choice(len(buffer), size=n, p=probabilities)

    def fill(
        self,
        buffer: TaskBuffer,
        chosen: np.ndarray,
        n: int,
        active: np.ndarray,
        exclude: np.ndarray | None,
    ) -> np.ndarray:
        """Top up a short draw: first active tasks the sampler gave no weight (in
        ``fill_order``), then retired tasks, at random (a run never starves)."""
        if len(chosen) >= n:
            return chosen
        taken = np.zeros(len(buffer), bool)
        taken[chosen] = True
        rest = np.flatnonzero(active & ~taken)
        extra = rest[np.argsort(self.fill_order(buffer, rest), kind="stable")][: n - len(chosen)]
        chosen = np.concatenate([chosen, extra])
        if len(chosen) < n:
            taken[extra] = True
            allowed = ~taken
            if exclude is not None and len(exclude):
                allowed[exclude] = False
            more = gumbel_top_k(allowed.astype(float), n - len(chosen), self.rng)
            chosen = np.concatenate([chosen, more])
        return chosen.astype(np.int64)

    def fill_order(self, buffer: TaskBuffer, candidates: np.ndarray) -> np.ndarray:
        """Sort keys for topping up (lowest first); random by default."""
        return self.rng.random(len(candidates))

    # ------------------------------------------------------------------ feedback
    def keep(self, successes: float, attempts: int) -> bool:
        return True

    def observe(self, buffer: TaskBuffer, indices: np.ndarray, step: int) -> None:
        """Called after the groups of ``indices`` were recorded."""

    def priority(self, buffer: TaskBuffer, step: int) -> np.ndarray:
        """What the sampler ranks tasks by (for the metrics' top tasks)."""
        return self.probabilities(buffer, step)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"name": self.name, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        if state["name"] != self.name:
            raise ValueError(f"checkpoint has sampler {state['name']!r}, config {self.name!r}")
        self.rng.bit_generator.state = state["rng"]


class UniformSampler(Sampler):
    name = "uniform"


class DapoSampler(Sampler):
    """DAPO dynamic sampling: uniform draws, keep groups with 0 < correct < G, refill."""

    name = "dapo"
    refills = True

    def keep(self, successes: float, attempts: int) -> bool:
        return 0 < successes < attempts


class BandSampler(Sampler):
    """p̂ ∈ [lo, hi], both edges inclusive; unseen tasks count as p̂ = prior_p."""

    name = "band"

    def weights(self, buffer: TaskBuffer, step: int) -> np.ndarray:
        p = self.prior_p_hat(buffer)
        return ((p >= self.settings.band_lo) & (p <= self.settings.band_hi)).astype(float)

    def fill_order(self, buffer: TaskBuffer, candidates: np.ndarray) -> np.ndarray:
        p = self.prior_p_hat(buffer)[candidates]
        distance = np.maximum(self.settings.band_lo - p, p - self.settings.band_hi)
        return distance + 1e-9 * self.rng.random(len(candidates))  # nearest first, ties random


class LearnabilitySampler(Sampler):
    """Priority p̂(1 − p̂); LILO's top-n of m·n uniform candidates when m > 1."""

    name = "learnability"

    def weights(self, buffer: TaskBuffer, step: int) -> np.ndarray:
        p = self.prior_p_hat(buffer)
        return p * (1 - p)

    def sample(self, buffer, n, step, exclude=None, replace=False) -> np.ndarray:
        m = self.settings.learnability_oversample
        if replace or m <= 1 or len(buffer) == 0 or n <= 0:
            return super().sample(buffer, n, step, exclude, replace)
        active = self.active(buffer, exclude)
        candidates = gumbel_top_k(active.astype(float), m * n, self.rng)
        priority = self.weights(buffer, step)[candidates]
        tiebreak = self.rng.random(len(candidates))
        order = np.lexsort((tiebreak, -priority))  # highest priority first, ties at random
        return self.fill(buffer, candidates[order[:n]], n, active, exclude)


class PlrSampler(Sampler):
    """Prioritized Level Replay: rank prioritisation of mean |advantage| mixed with staleness."""

    name = "plr"

    def replay_distribution(self, buffer: TaskBuffer, step: int, active: np.ndarray) -> np.ndarray:
        """P_replay over seen active tasks: (1 − ρ)·P_S + ρ·P_C (zero elsewhere)."""
        result = np.zeros(len(buffer))
        eligible = active & (buffer.attempts > 0)
        order = self.score_order(buffer)  # every task, highest score first
        ranked = order[eligible[order]]  # the seen active tasks, rank 1 first
        if len(ranked) == 0:
            return result
        rho = self.settings.plr_rho
        result[ranked] = (1 - rho) * self.rank_weights(len(ranked))
        staleness = np.maximum(step - buffer.last_seen[ranked], 0).astype(float)
        total = staleness.sum()
        result[ranked] += rho * (staleness / total if total > 0 else 1 / len(ranked))
        return result

    def rank_weights(self, count: int) -> np.ndarray:
        """P_S by rank: (1/rank)^(1/β) normalised over ``count`` tasks (cached per count)."""
        key = (count, self.settings.plr_beta)
        if getattr(self, "_rank_key", None) != key:
            h = np.arange(1, count + 1, dtype=float) ** (-1.0 / self.settings.plr_beta)
            self._rank_weights, self._rank_key = h / h.sum(), key
        return self._rank_weights

    def score_order(self, buffer: TaskBuffer) -> np.ndarray:
        """Tasks by descending score (unscored last, ties by task order); sorted again only
        after new results, so drawing is O(N) between records."""
        key = (buffer.updates, buffer.version)
        if getattr(self, "_order_key", None) != key:
            scores = np.nan_to_num(buffer.score, nan=-np.inf)
            self._order = np.argsort(-scores, kind="stable")
            self._order_key = key
        return self._order

    def weights(self, buffer: TaskBuffer, step: int) -> np.ndarray:
        return self.mixture(buffer, step, self.active(buffer))

    def probabilities(self, buffer, step, exclude=None) -> np.ndarray:
        return self.mixture(buffer, step, self.active(buffer, exclude))

    def sample(self, buffer, n, step, exclude=None, replace=False) -> np.ndarray:
        if replace or len(buffer) == 0 or n <= 0:
            return super().sample(buffer, n, step, exclude, replace)
        active = self.active(buffer, exclude)
        chosen = gumbel_top_k(self.mixture(buffer, step, active), n, self.rng)
        return self.fill(buffer, chosen, n, active, exclude)

    def mixture(self, buffer: TaskBuffer, step: int, active: np.ndarray) -> np.ndarray:
        """P(replay) = |seen| / |active| (PLR's proportionate replay decision), the rest
        uniform over unseen tasks."""
        count = active.sum()
        if count == 0:
            return np.zeros(len(buffer))
        unseen = active & ~buffer.seen
        replay = 1 - unseen.sum() / count
        result = self.replay_distribution(buffer, step, active)
        result *= replay
        if unseen.any():
            np.add(result, (1 - replay) / unseen.sum(), out=result, where=unseen)
        return result


@dataclass
class Arms:
    labels: list[str]
    code: np.ndarray  # arm of every task


class TsclSampler(Sampler):
    """Teacher-Student Curriculum Learning: a bandit over arms on absolute learning progress."""

    name = "tscl"

    def __init__(self, settings: CurriculumSettings, seed: int = 0) -> None:
        super().__init__(settings, seed)
        self.q: dict[str, float] = {}  # arm → Q (EMA of Δscore)
        self.last_score: dict[str, float] = {}  # arm → score when it was last observed
        self.rewards: dict[str, list[float]] = {}  # arm → its last `tscl_window` rewards

    def arms(self, buffer: TaskBuffer) -> Arms:
        """The buffer's family × level arms, or its families (``tscl_arms: family``)."""
        if self.settings.tscl_arms == "level":
            return Arms(buffer.arms, buffer.arm)
        return Arms(buffer.families, buffer.family)

    def arm_tasks(self, buffer: TaskBuffer, arm: int) -> np.ndarray:
        """The tasks of one arm (grouped once per task set, then sliced)."""
        key = (buffer.version, self.settings.tscl_arms)
        if getattr(self, "_groups_key", None) != key:
            code = self.arms(buffer).code
            self._grouped = np.argsort(code, kind="stable")
            self._starts = np.concatenate([[0], np.cumsum(np.bincount(code))])
            self._groups_key = key
        return self._grouped[self._starts[arm] : self._starts[arm + 1]]

    def arm_values(self, labels: list[str]) -> np.ndarray:
        """Each arm's value for the greedy choice: |Q| (Thompson: |one of its recent rewards|,
        drawn afresh at each call), +inf for arms never observed (the exploration prior)."""
        if self.settings.tscl_mode == "thompson":
            return self.thompson_draw(*self.windows(labels))
        return np.asarray([abs(self.q[lb]) if lb in self.q else math.inf for lb in labels], float)

    def windows(self, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's recent rewards as a zero-padded matrix, and how many each has."""
        windows = [self.rewards.get(label) or [] for label in labels]
        lengths = np.asarray([len(w) for w in windows], np.int64)
        padded = np.zeros((len(labels), max(int(lengths.max(initial=0)), 1)))
        for row, window in enumerate(windows):
            padded[row, : len(window)] = window
        return padded, lengths

    def thompson_draw(self, padded: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """|one reward drawn at random from each arm's window|; +inf for empty windows."""
        picks = (self.rng.random(len(lengths)) * np.maximum(lengths, 1)).astype(np.int64)
        values = np.abs(padded[np.arange(len(lengths)), picks])
        return np.where(lengths > 0, values, math.inf)

    def choose_arm(self, available: np.ndarray, values) -> int:
        """ε-greedy on |Q| or a Thompson draw; ``values()`` gives each arm's value (a fresh
        draw for Thompson); ties at random."""
        arms = np.flatnonzero(available)
        explore = self.settings.tscl_epsilon if self.settings.tscl_mode == "epsilon" else 0.0
        if self.rng.random() < explore:
            return int(arms[self.rng.integers(len(arms))])
        chosen = values()[arms]
        best = np.flatnonzero(chosen == chosen.max())
        return int(arms[best[self.rng.integers(len(best))]])

    def probabilities(self, buffer, step, exclude=None) -> np.ndarray:
        """ε spread over the available arms plus 1 − ε on the best (Thompson: one draw's best);
        uniform within an arm."""
        info = self.arms(buffer)
        active = self.active(buffer, exclude)
        per_arm = np.bincount(info.code[active], minlength=len(info.labels))
        available = per_arm > 0
        result = np.zeros(len(buffer))
        if not available.any():
            return result
        values = self.arm_values(info.labels)
        values[~available] = -math.inf
        best = np.flatnonzero(values == values.max())
        eps = self.settings.tscl_epsilon if self.settings.tscl_mode == "epsilon" else 0.0
        arm_p = np.zeros(len(info.labels))
        arm_p[available] += eps / available.sum()
        arm_p[best] += (1 - eps) / len(best)
        result[active] = arm_p[info.code[active]] / per_arm[info.code[active]]
        return result

    def sample(self, buffer, n, step, exclude=None, replace=False) -> np.ndarray:
        """Arms slot by slot (an arm whose tasks are used up drops out), then tasks uniformly
        within each chosen arm."""
        if len(buffer) == 0 or n <= 0:
            return np.zeros(0, np.int64)
        info = self.arms(buffer)
        active = self.active(buffer, exclude)
        remaining = np.bincount(info.code[active], minlength=len(info.labels))
        slots = np.zeros(len(info.labels), np.int64)
        if self.settings.tscl_mode == "epsilon":  # |Q| does not change within a batch
            fixed = self.arm_values(info.labels)
            values = lambda: fixed  # noqa: E731
        else:
            padded, lengths = self.windows(info.labels)
            values = lambda: self.thompson_draw(padded, lengths)  # noqa: E731
        for _ in range(n):
            available = remaining > 0
            if not available.any():
                break
            arm = self.choose_arm(available, values)
            slots[arm] += 1
            if not replace:
                remaining[arm] -= 1
        chosen = []
        for arm in np.flatnonzero(slots):
            pool = self.arm_tasks(buffer, arm)
            pool = pool[active[pool]]
            if replace:
                chosen.append(pool[self.rng.integers(len(pool), size=slots[arm])])
            else:
                chosen.append(pool[self.rng.permutation(len(pool))[: slots[arm]]])
        picked = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
        picked = picked[self.rng.permutation(len(picked))]  # no arm order within the batch
        return picked if replace else self.fill(buffer, picked, n, active, exclude)

    def observe(self, buffer: TaskBuffer, indices: np.ndarray, step: int) -> None:
        """Per arm drawn: score x = mean pass rate of its groups just graded; reward
        r = x − x_prev (the arm's score when last observed), Q ← Q + α(r − Q)."""
        info = self.arms(buffer)
        indices = np.asarray(indices, np.int64)
        if len(indices) == 0:
            return
        last = buffer.column("p_last")[indices]
        codes = info.code[indices]
        for arm in np.unique(codes):
            label = info.labels[arm]
            score = float(np.nanmean(last[codes == arm]))
            if label in self.last_score:
                reward = score - self.last_score[label]
                q = self.q.get(label, 0.0)
                self.q[label] = q + self.settings.tscl_alpha * (reward - q)
                window = self.rewards.setdefault(label, [])
                window.append(reward)
                del window[: -self.settings.tscl_window]
            else:  # first observation: seen, no progress measured yet
                self.q.setdefault(label, 0.0)
                self.rewards.setdefault(label, [0.0])
            self.last_score[label] = score

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "q": dict(self.q),
            "last_score": dict(self.last_score),
            "rewards": {k: list(v) for k, v in self.rewards.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.q = dict(state["q"])
        self.last_score = dict(state["last_score"])
        self.rewards = {k: list(v) for k, v in state["rewards"].items()}


SAMPLER_CLASSES: dict[str, type[Sampler]] = {
    cls.name: cls
    for cls in (
        UniformSampler,
        BandSampler,
        DapoSampler,
        LearnabilitySampler,
        PlrSampler,
        TsclSampler,
    )
}


def make_sampler(settings: Any, seed: int = 0) -> Sampler:
    """The sampler ``settings.sampler`` names (settings: ``CurriculumSettings`` or the config)."""
    try:
        cls = SAMPLER_CLASSES[settings.sampler]
    except KeyError:
        known = ", ".join(SAMPLERS)
        raise ValueError(f"unknown sampler {settings.sampler!r} (known: {known})") from None
    return cls(settings, seed)


# ---------------------------------------------------------------------- the loop-facing API
@dataclass
class Group:
    """One graded group: a task's G answers. ``payload`` is whatever the loop trains on."""

    task: int
    successes: float
    attempts: int
    rewards: Sequence[float]
    payload: Any = None

    @property
    def effective(self) -> bool:
        """Non-zero advantage: the group's rewards are not all equal."""
        return len(self.rewards) > 1 and max(self.rewards) > min(self.rewards)

    @property
    def mean_abs_advantage(self) -> float:
        """PLR's score: mean |r − r̄| over the group (the group-relative advantage, unscaled)."""
        if not self.rewards:
            return 0.0
        mean = sum(self.rewards) / len(self.rewards)
        return sum(abs(r - mean) for r in self.rewards) / len(self.rewards)


def groups_of(indices: Sequence[int], episodes: Sequence[Any], size: int, role: str) -> list[Group]:
    """Episodes played ``size`` per task, in the order of ``indices``, as one ``Group`` per task:
    successes = episodes whose ``info["correct"]`` is true, rewards = the ``role``'s rewards."""
    groups = []
    for k, index in enumerate(indices):
        members = episodes[k * size : (k + 1) * size]
        groups.append(
            Group(
                task=int(index),
                successes=float(sum(bool(e.info["correct"]) for e in members)),
                attempts=size,
                rewards=[e.rewards[role] for e in members],
                payload=members,
            )
        )
    return groups


class Curriculum:
    """A buffer and a sampler, as a loop uses them::

        curriculum = Curriculum(config.curriculum, seed)
        curriculum.add("chain_sum@1#17", family="chain_sum", difficulty=1)
        groups = await curriculum.fill(n, step, play)   # play(indices) -> list[Group]
        metrics |= curriculum.metrics(step)              # once per step

    ``fill`` draws n tasks, plays them, records every group in the buffer, keeps the groups the
    sampler keeps, and (DAPO) draws again for the rest, at most ``dapo_max_rounds`` times.
    """

    def __init__(self, settings: Any, seed: int = 0) -> None:
        self.settings = settings
        self.buffer = TaskBuffer(ema=settings.ema)
        self.sampler = make_sampler(settings, seed)
        self._step: dict[str, Any] = {}

    def add(self, task_id: str, family: str = "", difficulty: float = math.nan) -> int:
        return self.buffer.add(task_id, family=family, difficulty=difficulty)

    def sample(self, n: int, step: int, exclude=None, replace: bool = False) -> np.ndarray:
        return self.sampler.sample(self.buffer, n, step, exclude, replace)

    def record(self, groups: list[Group], step: int) -> None:
        """Record graded groups, retire what crossed the threshold, let the sampler learn."""
        for group in groups:
            self.buffer.record(
                group.task, group.successes, group.attempts, step, group.mean_abs_advantage
            )
        retired = self.buffer.retire(self.settings.retire_at, self.settings.retire_min_attempts)
        self.sampler.observe(self.buffer, np.asarray([g.task for g in groups], np.int64), step)
        stats = self._step
        stats["retired_now"] = stats.get("retired_now", 0) + retired
        stats.setdefault("groups", []).extend(groups)

    async def fill(
        self,
        n: int,
        step: int,
        play: Callable[[np.ndarray], Awaitable[list[Group]]],
        exclude: Sequence[int] = (),
    ) -> list[Group]:
        """Draw n tasks, play and record them; DAPO: draw again for the groups it does not
        keep, at most ``dapo_max_rounds`` more rounds. Returns the kept groups (≤ n).
        ``exclude``: tasks never drawn here (e.g. an earlier pool's tasks)."""
        kept: list[Group] = []
        drawn: list[int] = [int(i) for i in exclude]
        rounds = 0
        while True:
            indices = self.sample(n - len(kept), step, exclude=np.asarray(drawn, np.int64))
            if len(indices) == 0:
                break
            drawn += indices.tolist()
            groups = await play(indices)
            self.record(groups, step)
            kept += [g for g in groups if self.sampler.keep(g.successes, g.attempts)]
            if (
                not self.sampler.refills
                or len(kept) >= n
                or rounds >= self.settings.dapo_max_rounds
            ):
                break
            rounds += 1
        self._step["rounds"] = self._step.get("rounds", 0) + rounds
        self._step["kept"] = self._step.get("kept", 0) + len(kept)
        return kept[:n]

    def metrics(self, step: int = 0) -> dict[str, float | str]:
        """This step's sampler state for metrics.jsonl (and reset the step's counters)."""
        stats, self._step = self._step, {}
        groups: list[Group] = stats.get("groups", [])
        buffer = self.buffer
        metrics: dict[str, float | str] = {
            "curriculum/drawn_groups": float(len(groups)),
            "curriculum/kept_groups": float(stats.get("kept", len(groups))),
            "curriculum/refill_rounds": float(stats.get("rounds", 0)),
            "curriculum/effective_ratio": (
                sum(g.effective for g in groups) / len(groups) if groups else 0.0
            ),
            "curriculum/seen": float(buffer.seen.sum()),
            "curriculum/retired": float(buffer.retired.sum()),
            "curriculum/retired_now": float(stats.get("retired_now", 0)),
        }
        if groups:
            tasks = np.asarray([g.task for g in groups])
            difficulty = buffer.difficulty[tasks]
            known = difficulty[~np.isnan(difficulty)]
            if len(known):
                metrics["curriculum/difficulty_mean"] = float(known.mean())
            labels = [level_label(d) for d in difficulty]  # "?" for tasks without a level
            for label in sorted(set(labels)):
                metrics[f"curriculum/difficulty/{label}"] = labels.count(label) / len(groups)
        metrics["curriculum/top_tasks"] = self.top_tasks(step)
        return metrics

    def top_tasks(self, step: int) -> str:
        """The sampler's top-k tasks by priority: ``id=priority`` joined by spaces."""
        if len(self.buffer) == 0:
            return ""
        priority = self.sampler.priority(self.buffer, step)
        top = np.argsort(-priority, kind="stable")[: self.settings.top_k]
        return " ".join(f"{self.buffer.ids[i]}={priority[i]:.3g}" for i in top)

    def state_dict(self) -> dict:
        return {"buffer": self.buffer.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.sampler.load_state_dict(state["sampler"])
