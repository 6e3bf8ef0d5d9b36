"""R-Zero's rewards (Huang et al. 2025, arXiv:2508.05004; docs/algorithms.md#r-zero), the forms
Agent0's loop does not already have: the released code's challenger reward and its solver reward.

R-Zero runs as an Agent0 experiment (docs/rzero.md): the paper's challenger reward is Agent0's
paper composite with no tool term, max(0, R_unc − R_rep) with a format filter
(``curricula.rewards.curriculum_reward_paper`` at λ_tool = 0). What differs in the released code
(examples/reward_function/caller_penalty.py and math.py there) is here:

- ``challenger_reward_code``: min(p̂, 1 − p̂) − cluster share, and −1 − cluster share for an
  unparsable output (its empty question is clustered with the rest of the batch);
- ``solver_reward``: 0.9·accuracy + 0.1·format, the format being ``<think>…</think>…\\boxed{}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from curricula.rewards import bleu_clusters, cluster_shares, uncertainty_code

# EasyR1's math format check, as R-Zero's math.py uses it: a full match, any text in between
THINK_BOXED = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)
INVALID = -1.0  # the code's score for an output with no <question> or no \boxed{} answer


def batch_cluster_shares(questions: list[str | None], threshold: float = 0.5) -> list[float]:
    """|C_k|/B over the WHOLE batch, an unparsable output entering as the empty question (as the
    released code does: it keeps "" for those). An empty text has BLEU 0 with every text, so it
    is its own cluster: its share is 1/B."""
    return cluster_shares(bleu_clusters([q or "" for q in questions], threshold))


def challenger_reward_code(
    valid: bool, p_hat: float, share: float,
    reward: Callable[[float], float] = uncertainty_code,
) -> float:
    """R-Zero's released challenger reward: min(p̂, 1 − p̂) − share for a parsed question,
    −1 − share otherwise (½·R_unc − R_rep with λ = 1 and no clamp at 0). ``reward`` replaces
    min(p̂, 1 − p̂) for an ablation (``agent0.proposer_reward``)."""
    return (reward(p_hat) if valid else INVALID) - share


def solver_format(text: str) -> float:
    """1 when the reply is ``<think>…</think>`` then a ``\\boxed{}`` answer, else 0."""
    return 1.0 if THINK_BOXED.fullmatch(text) else 0.0


def solver_reward(correct: bool, text: str, format_weight: float = 0.1) -> float:
    """R-Zero's released solver reward: (1 − w)·accuracy + w·format, w = 0.1; accuracy is the
    answer's equivalence with the majority pseudo-label."""
    return (1.0 - format_weight) * float(correct) + format_weight * solver_format(text)
