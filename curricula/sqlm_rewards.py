"""Self-Questioning Language Models (Chen et al. 2025, arXiv:2508.03682; docs/algorithms.md#sqlm):
how a proposal is read, how the solver's N answers to it are scored, and the proposer's reward.

The released code (verl/workers/reward_manager/majority.py and verl/trainer/ppo/ray_trainer.py):

- the solver's answers to one proposal are counted as strings (``Counter``, no equivalence);
  the majority is the most common one, ties going to the one seen first (``most_common``);
- solver reward 1 iff the answer equals the majority and the majority is not None;
- m_maj = the sum of those rewards (0 when the majority is None); proposer reward, math:
  1 iff 1 < m_maj < N (the paper: 0 < m_maj < N); coding: 1 iff 0 < mean solver score < 1;
- algebra: a proposal without "Selected Question" is masked out of both losses; arithmetic:
  the whole reply is the question; coding: a problem, then "Test Cases:" and ``input |||
  output`` lines (none: masked); a solver program's score is its share of those tests passed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from curricula.answers import extract_answer

SELECTED = "Selected Question"
TEST_CASES = "Test Cases:"
MAX_TESTS = 5  # the coding prompt asks for 5
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def read_proposal(reply: str, topic: str) -> str | None:
    """The question a proposer reply poses, or None when it is unparsable (masked).

    arithmetic: the whole reply (the code never masks one; an empty reply is the only
    exception here); algebra: what follows the last "Selected Question", a leading ":" and
    spaces stripped."""
    if topic == "algebra":
        if SELECTED not in reply:
            return None
        reply = reply.split(SELECTED)[-1].lstrip(" :*\n")
    question = reply.strip()
    return question or None


def solver_answer(reply: str, lenient: bool = False) -> str | None:
    """The last ``<answer>…</answer>`` (the solver prompt's format), else the last
    ``\\boxed{}``; with ``lenient``, else the last number. Whitespace stripped."""
    tagged = _ANSWER_TAG.findall(reply)
    if tagged:
        return tagged[-1].strip() or None
    answer, _ = extract_answer(reply, lenient=lenient)
    return answer.strip() if answer is not None else None


def majority(answers: Sequence[str | None]) -> str | None:
    """The most common answer (None counts as an answer), first seen among equals."""
    return Counter(answers).most_common(1)[0][0] if answers else None


def solver_rewards(answers: Sequence[str | None]) -> list[float]:
    """1 for an answer equal to the majority when the majority is not None, else 0."""
    label = majority(answers)
    return [1.0 if label is not None and answer == label else 0.0 for answer in answers]


ProposerForm = Literal["code", "paper"]


def proposer_reward(m_maj: float, n: int, form: ProposerForm = "code") -> float:
    """1 when the solvers disagree but not entirely: 1 < m_maj < N (code), 0 < m_maj < N
    (paper). m_maj = number of solver answers equal to a non-None majority."""
    low = 1 if form == "code" else 0
    return 1.0 if low < m_maj < n else 0.0


def read_coding(reply: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(problem, [(stdin, expected stdout)]) of a coding proposal, or None (masked): the text
    before the last "Test Cases:" is the problem, each later line with ``|||`` a test (a
    written ``\\n`` is a newline), at most ``MAX_TESTS``."""
    if TEST_CASES not in reply:
        return None
    problem, _, cases = reply.rpartition(TEST_CASES)
    tests = []
    for line in cases.splitlines():
        given, bar, expected = line.partition("|||")
        if bar and expected.strip():
            tests.append((_unescape(given) + "\n", _unescape(expected) + "\n"))
    if not problem.strip() or not tests:
        return None
    return problem.strip(), tests[:MAX_TESTS]


def _unescape(value: str) -> str:
    return value.strip().strip("`").replace("\\n", "\n").strip()


def proposer_reward_coding(mean_score: float) -> float:
    """Coding: 1 iff the solvers' mean test score is strictly between 0 and 1."""
    return 1.0 if 0.0 < mean_score < 1.0 else 0.0
