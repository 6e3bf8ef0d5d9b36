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
  until the batch is full or ``dapo_max_rounds`` refill rounds are spent
  (``curricula.curriculum.Curriculum.redraw``).
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

import numpy as np

from curricula.buffer import TaskBuffer
from curricula.settings import CurriculumSettings


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
