"""SPELL's formulas (Yang et al. 2025, arXiv:2509.23863; docs/algorithms.md#spell): parsing the
questioner's, responder's and verifier's replies, the rule score, the verifier's majority and the
three roles' rewards. Pure functions over strings and numbers (no model, no loop).

- ``parse_question``: ``Question: ...`` / ``Answer: ...`` (tags ``<question>``/``<answer>`` too).
- ``final_answer`` and ``sub_em_strict``: the responder's rule score.
- ``parse_vote``, ``majority``: the verifier's YES (1) / NO (0) / unparsable (−1) votes.
- ``responder_reward``, ``verifier_rewards``, ``verifier_trains``, ``questioner_reward``,
  ``is_bad_ground``: the rewards and filters of the released code.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from curricula.answers import last_boxed, normalise_text
from curricula.rewards import gaussian

YES, NO, UNPARSABLE = 1, 0, -1
BAD_FORMAT_REWARD = -1.0
BAD_GROUND_REWARD = -0.5
GROUNDING_THRESHOLD = 0.1  # closed-book score at or above which a question is `bad_ground`
ACCEPT_RANGE = (0.01, 1.0)  # responder mean that admits a question to its cluster's memory
VERIFIER_SHARE_RANGE = (0.51, 0.99)  # majority share of a verifier group that trains
MAX_ANSWER_WORDS = 30  # a "reference answer" longer than this is a passage, not an answer

_FIELD = re.compile(
    r"(?:<(question|answer)>\s*(.*?)\s*</\1>)|(?:^\s*\**(question|answer)\**\s*:\s*(.*?)\s*$)",
    re.IGNORECASE | re.MULTILINE | re.DOTALL,
)
_STATED = re.compile(r"answer\s*(?:is|:)\s*:?\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_VOTE = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


# ---------------------------------------------------------------------- parsing
def parse_question(reply: str, max_words: int = MAX_ANSWER_WORDS) -> tuple[str, str] | None:
    """(question, reference answer) from a questioner's reply, or None (bad format).

    The first ``Question:`` and the first ``Answer:`` after it (one line each), or the first
    ``<question>`` and ``<answer>`` pairs. Bad format: either part missing or empty, or an
    answer longer than ``max_words`` words, or one the question already contains."""
    fields: dict[str, str] = {}
    for match in _FIELD.finditer(reply):
        name = (match.group(1) or match.group(3)).lower()
        value = (match.group(2) if match.group(1) else match.group(4)).strip()
        if name == "answer" and "question" not in fields:
            continue  # an answer before any question is not this question's
        fields.setdefault(name, value)
    question, answer = fields.get("question", ""), fields.get("answer", "")
    if not question or not answer or len(answer.split()) > max_words:
        return None
    if not normalise_text(answer) or contains(normalise_text(question), normalise_text(answer)):
        return None  # an answer written out in its own question asks nothing
    return question, answer


def final_answer(reply: str) -> str | None:
    """The responder's final answer: its last ``\\boxed{}``, else the last "answer is X" /
    "Answer: X" line; None when it states none (strict: the whole reply is never the answer,
    or copying the document would contain every reference)."""
    boxed = last_boxed(reply)
    if boxed is not None:
        return boxed
    stated = _STATED.findall(reply)
    return stated[-1].strip().rstrip(".") if stated else None


def contains(text: str, part: str) -> bool:
    """``part``'s words appear in ``text`` as a run of whole words (both already normalised)."""
    return bool(part) and f" {part} " in f" {text} "


def sub_em_strict(answer: str | None, reference: str) -> float:
    """The rule score: 1.0 when the normalised reference (lower case, no punctuation or
    articles) appears as whole words in the normalised final answer, else 0.0; 0.0 with no
    final answer. "10" is not in "100"; "Paris" is in "the city of Paris"."""
    if answer is None:
        return 0.0
    return float(contains(normalise_text(answer), normalise_text(reference)))


def parse_vote(reply: str) -> int:
    """A verifier's vote: YES → 1, NO → 0, unparsable → −1. The last ``\\boxed{}`` decides
    when there is one; otherwise the last standalone yes/no word. Neither: −1."""
    boxed = last_boxed(reply)
    text = boxed if boxed is not None else reply
    words = [w.lower() for w in _VOTE.findall(text)]
    if boxed is not None and len(set(words)) != 1:
        return UNPARSABLE  # a box holding both words, or neither
    if not words:
        return UNPARSABLE
    return YES if words[-1] == "yes" else NO


# ---------------------------------------------------------------------- the verifier
def majority(votes: Sequence[int]) -> int:
    """The most common vote (YES 1, NO 0, unparsable −1); a tie goes to the vote cast first
    (collections.Counter keeps first-seen order among equals)."""
    return Counter(votes).most_common(1)[0][0] if votes else UNPARSABLE


def majority_share(votes: Sequence[int]) -> float:
    return Counter(votes)[majority(votes)] / len(votes) if votes else 0.0


def verifier_rewards(votes: Sequence[int]) -> list[float]:
    """Each vote's reward: 1 when it equals the majority, 0 otherwise, −1 when unparsable."""
    winner = majority(votes)
    return [-1.0 if v == UNPARSABLE else float(v == winner) for v in votes]


def verifier_trains(votes: Sequence[int], rule_score: float) -> bool:
    """``label_type=maj_cons``: a verifier group trains when its majority share is within
    [0.51, 0.99] (neither a tie nor unanimous) and its majority agrees with the rule score."""
    lo, hi = VERIFIER_SHARE_RANGE
    winner = majority(votes)
    return winner != UNPARSABLE and lo <= majority_share(votes) <= hi and winner == rule_score


# ---------------------------------------------------------------------- the responder
def responder_reward(rule_score: float, verdict: int) -> float:
    """max(rule score, verifier majority) where the majority is valid; the rule score alone
    when the verifier's majority is unparsable (−1)."""
    return rule_score if verdict == UNPARSABLE else max(rule_score, float(verdict))


def is_bad_ground(closed_book_scores: Sequence[float]) -> bool:
    """A question answered without its documents (mean rule score ≥ 0.1) is not grounded."""
    if not closed_book_scores:
        return False
    return sum(closed_book_scores) / len(closed_book_scores) >= GROUNDING_THRESHOLD


# ---------------------------------------------------------------------- the questioner
def questioner_reward(
    mean_reward: float | None, reward: Callable[[float], float] = gaussian,
    bad_ground: bool = False,
) -> float:
    """The questioner's reward from r̄, its question's mean responder reward (None: bad
    format). Bad format −1; ``bad_ground`` −0.5; r̄ ≤ 0 → r̄; r̄ = 1 → 0; otherwise ``reward``
    of r̄, a p̂ → reward of ``curricula/rewards.py``: ``gaussian`` (the released code's
    default, exp(−(r̄ − ½)²/(2σ²))), ``learnability`` (its ``reverse``, 1 − r̄, AZR) or
    ``uncertainty`` (its ``rzero``, 1 − 2|r̄ − ½|)."""
    if mean_reward is None:
        return BAD_FORMAT_REWARD
    if bad_ground:
        return BAD_GROUND_REWARD
    if mean_reward <= 0.0:
        return float(mean_reward)
    if mean_reward >= 1.0:
        return 0.0
    return float(reward(mean_reward))


def accepted(mean_reward: float | None, bad_ground: bool) -> bool:
    """A question joins its cluster's memory when well formed, grounded and answered with a
    mean reward in [0.01, 1.0] (the responder found it, at least sometimes)."""
    lo, hi = ACCEPT_RANGE
    return mean_reward is not None and not bad_ground and lo <= mean_reward <= hi
