"""Agent0's rewards as its settings choose them: the curriculum composite (paper, released
Agent0 code, or released R-Zero code) and the executor's reward (binary, signed, or R-Zero's
0.9·accuracy + 0.1·format). The formulas are in ``curricula/rewards.py`` and
``curricula/rzero_rewards.py``; this module only picks and feeds them."""

from __future__ import annotations

from collections.abc import Callable

from curricula import rzero_rewards
from curricula.rewards import (
    bleu_clusters,
    cluster_shares,
    curriculum_reward_code,
    curriculum_reward_paper,
)
from selfplay.loops.agent0.kinds import ScoredTask
from selfplay.loops.agent0.settings import Agent0Settings


def curriculum_rewards(
    s: Agent0Settings, tasks: list[ScoredTask], proposer_reward: Callable[[float], float]
) -> tuple[list[float], list[float]]:
    """(reward, repetition penalty) per proposal."""
    if s.reward_form == "rzero":
        return _rzero_rewards(s, tasks, proposer_reward)
    questions = [t.proposal.question for t in tasks if t.proposal.valid]
    shares = iter(cluster_shares(bleu_clusters(questions, s.repetition_threshold)))
    rewards, penalties = [], []
    for task in tasks:
        penalty = s.repetition_weight * next(shares) if task.proposal.valid else 0.0
        if s.reward_form == "paper":
            reward = curriculum_reward_paper(
                task.proposal.valid, task.p_hat, task.tool_calls, penalty,
                reward=proposer_reward, lambda_unc=s.lambda_unc,
                lambda_tool=s.lambda_tool, gamma=s.tool_gamma, cap=s.tool_cap,
            )
        else:
            reward = curriculum_reward_code(
                task.proposal.valid, task.p_hat, task.proposal.text, penalty,
                agrees=task.agrees if s.agreement_gate else None,
                reward=proposer_reward, gamma=s.tool_gamma, cap=s.tool_cap,
            )
        rewards.append(reward)
        penalties.append(penalty)
    return rewards, penalties


def _rzero_rewards(
    s: Agent0Settings, tasks: list[ScoredTask], proposer_reward: Callable[[float], float]
) -> tuple[list[float], list[float]]:
    """R-Zero's code: every output, parsed or not, is in the clustered batch."""
    questions = [t.proposal.question if t.proposal.valid else None for t in tasks]
    shares = rzero_rewards.batch_cluster_shares(questions, s.repetition_threshold)
    penalties = [s.repetition_weight * share for share in shares]
    rewards = [
        rzero_rewards.challenger_reward_code(t.proposal.valid, t.p_hat, penalty, proposer_reward)
        for t, penalty in zip(tasks, penalties, strict=True)
    ]
    return rewards, penalties


def executor_reward(s: Agent0Settings, correct: bool, text: str) -> float:
    """An executor-phase sample's reward: 1/0 (paper), ±1 (Agent0's code), or R-Zero's code
    (1 − w)·correct + w·format."""
    if s.executor_reward == "format":
        return rzero_rewards.solver_reward(correct, text, s.executor_format_weight)
    if correct:
        return 1.0
    return -1.0 if s.executor_reward == "signed" else 0.0
