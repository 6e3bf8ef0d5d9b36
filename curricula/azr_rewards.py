"""Absolute Zero's rewards (arXiv 2505.03335 eq. 4-6; docs/algorithms.md#azr): the proposer's
learnability and the solver's accuracy, in the paper's form and in the released code's.

Every reply is in one of three states (``Outcome``): ``format`` (it could not be read), ``wrong``
(read, but the task it proposes is not valid / the answer it gives does not pass) or ``passed``.

- Solver: 1 if passed, −0.5 if wrong, −1 on a format error (both forms).
- Proposer of a valid task: learnability 1 − r̄ when 0 < r̄ < 1, where r̄ (p̂) is the share of
  n fresh solver samples on it that pass; a task every sample solves, or none does, teaches
  nothing: 0 in the paper, −0.5 in the released code (``learnability`` and
  ``learnability_code`` in ``curricula/rewards.py``, the one p̂ → reward registry).
- Proposer of an invalid task: −0.5 in the paper (a well-formatted reply that does not pass,
  eq. 6), −1 in the code (an invalid program scores like a format error). A format error is −1
  in both.
"""

from __future__ import annotations

from typing import Literal

from curricula.rewards import learnability, learnability_code

Outcome = Literal["format", "wrong", "passed"]
Form = Literal["paper", "code"]

FORMAT_ERROR = -1.0
WRONG = -0.5


def proposer_reward(outcome: Outcome, solve_rate: float | None = None,
                    form: Form = "paper") -> float:
    """The proposer's reward for one reply: learnability of a valid task (``passed``, which
    needs ``solve_rate``), else −0.5 / −1 as the module docstring says."""
    if outcome == "format":
        return FORMAT_ERROR
    if outcome == "wrong":
        return WRONG if form == "paper" else FORMAT_ERROR
    if solve_rate is None:
        raise ValueError("a valid proposal's reward needs the solver's rate r̄")
    return learnability(solve_rate) if form == "paper" else learnability_code(solve_rate)


def solver_reward(outcome: Outcome) -> float:
    """1 for a passing answer, −0.5 for a readable wrong one, −1 for a format error."""
    return {"passed": 1.0, "wrong": WRONG, "format": FORMAT_ERROR}[outcome]
