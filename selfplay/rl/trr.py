"""Task-Relative REINFORCE++ (TRR++, Absolute Zero arXiv 2505.03335 eq. 8;
docs/algorithms.md#azr): one baseline per (task mode, role), six in all for AZR's three modes
and two roles, computed over the step's batch of that (mode, role).

- ``paper``: Â = (r − μ)/σ over the batch's sequences (population σ, as our GRPO; + ε so a
  batch of equal rewards gives 0).
- ``code`` (the released verl code): each (mode, role) batch gets its own REINFORCE++ pass.
  With γ = 1 and the reward on the last token, every token's return is the sequence's reward;
  ``masked_whiten`` then normalises over the batch's response TOKENS: the mean weighted by
  each sequence's token count, the unbiased (n − 1) variance over tokens, and
  (r − μ)/√(var + 1e-8). Long replies therefore weigh more in μ and σ than in the paper form.

Every token of a sequence gets the same advantage in both forms, so a ``Sample`` keeps one
scalar. Episodes are keyed by ``Episode.env`` (the mode) and the role that holds the reward.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

from selfplay.types import Episode, Sample

Form = Literal["paper", "code"]
PAPER_EPS = 1e-6  # added to σ (as selfplay.rl.advantages' GRPO)
WHITEN_EPS = 1e-8  # added to the variance (verl's masked_whiten)


def trr_paper(rewards: list[float]) -> list[float]:
    """(r − μ)/(σ + ε) over one (mode, role) batch of sequences, population σ."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + PAPER_EPS) for r in rewards]


def trr_code(rewards: list[float], tokens: list[int]) -> list[float]:
    """REINFORCE++ (γ = 1) then whitening over the batch's response tokens: μ = Σ Lᵢrᵢ / Σ Lᵢ,
    var = Σ Lᵢ(rᵢ − μ)² / (Σ Lᵢ − 1), Â = (r − μ)/√(var + 1e-8). A batch of one token has no
    unbiased variance: its advantage is 0."""
    total = sum(tokens)
    if total <= 1:
        return [0.0] * len(rewards)
    mean = sum(r * n for r, n in zip(rewards, tokens, strict=True)) / total
    var = sum(n * (r - mean) ** 2 for r, n in zip(rewards, tokens, strict=True)) / (total - 1)
    return [(r - mean) / math.sqrt(var + WHITEN_EPS) for r in rewards]


def trr_samples(episodes: Iterable[Episode], form: Form = "paper") -> list[Sample]:
    """One sample per rewarded turn, its advantage against the other turns of its
    (``episode.env``, role) batch in this step."""
    batches: dict[tuple[str, str], list[tuple[Episode, object]]] = defaultdict(list)
    for episode in episodes:
        for role in episode.rewards:
            for turn in episode.turns:
                if turn.role == role:
                    batches[(episode.env, role)].append((episode, turn))
    samples = []
    for (_, role), members in batches.items():
        rewards = [episode.rewards[role] for episode, _ in members]
        if form == "paper":
            advantages = trr_paper(rewards)
        else:
            advantages = trr_code(rewards, [turn.num_model_tokens for _, turn in members])
        for (episode, turn), advantage in zip(members, advantages, strict=True):
            samples.append(Sample(turn=turn, advantage=advantage, group_id=episode.group_id,
                                  pass_rate=episode.pass_rate, info={"env": episode.env}))
    return samples
