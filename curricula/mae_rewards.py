"""Multi-Agent Evolve's rewards (arXiv 2510.23595; docs/algorithms.md#mae): one policy proposes
questions, answers them and judges both; the judge's parsed scores are the rewards.

- **Judge score** of one judge reply (``judge_score``): inside each ``<score>…</score>`` a
  fraction a/b, else a decimal, else an integer; with no tag that parses, the last number
  anywhere in the reply. The FIRST score s maps to clip((s − 1)/9, 0, 1) (a 1-10 scale). A
  reply with no number at all is unparsable: it is skipped (``None``), and an item none of whose
  judge samples parsed gets 0.5 (``mean_judge``).
- **Solver**: 0.5 · mean judge(answer) + 0.5 · format, format 1 for exactly one ``<answer>``
  pair, 0.5 for more (balanced), else 0.
- **Proposer**: q = mean judge(question), d = 1 − mean judge(answer) over the solver's answers,
  f = the tag-count format (``proposer_format``); (q + d + f)/3 when q ≥ 0.7 (the question
  then enters the pool), else (q + f)/3; 0 without a ``<question>``.
- **Judge**: format only, 1 for exactly three ``<score>`` pairs, 0.5 for more (balanced), else 0.

Dependency-free (the standard library only), like the rest of ``curricula/``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

NEUTRAL = 0.5  # an item no judge sample scored, and an empty reply's format (released code)
ADMIT = 0.7  # q at or above which a question enters the pool and d counts

_SCORE_TAG = re.compile(r"<score>(.*?)</score>", re.IGNORECASE | re.DOTALL)
_FRACTION = re.compile(r"\b(\d+)/(\d+)\b")
_DECIMAL = re.compile(r"\b(\d+\.\d+)\b")
_INTEGER = re.compile(r"\b(\d+)\b")
_ANY_NUMBER = re.compile(r"\b\d+/\d+\b|\b\d+\.\d+\b|\b\d+\b")
_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _tag_value(content: str) -> float | None:
    """One tag's number: a fraction first, then a decimal, then an integer. A fraction over 0
    gives nothing (the released code does not fall through to the decimal then)."""
    if found := _FRACTION.search(content):
        top, bottom = int(found.group(1)), int(found.group(2))
        return float(Fraction(top, bottom)) if bottom else None
    if found := _DECIMAL.search(content):
        return float(found.group(1))
    if found := _INTEGER.search(content):
        return float(found.group(1))
    return None


def parse_scores(text: str) -> list[float]:
    """Every score the reply gives: one per ``<score>`` tag that parses, or, with none, the
    last number anywhere in the text (a list of one), or nothing."""
    scores = [v for c in _SCORE_TAG.findall(text) if (v := _tag_value(c.strip())) is not None]
    if scores:
        return scores
    numbers = _ANY_NUMBER.findall(text)
    if not numbers:
        return []
    last = numbers[-1]
    if "/" in last:
        top, bottom = (int(part) for part in last.split("/"))
        return [float(Fraction(top, bottom))] if bottom else []
    return [float(last)]


def judge_score(text: str) -> float | None:
    """The judge's score in [0, 1]: the first score s as clip((s − 1)/9, 0, 1); None when the
    reply gives no number (an unparsable judge sample, skipped)."""
    scores = parse_scores(text)
    if not scores:
        return None
    return min(1.0, max(0.0, (scores[0] - 1.0) / 9.0))


def mean_judge(scores: Sequence[float | None]) -> float:
    """The mean of the judge samples that parsed; 0.5 when none did."""
    parsed = [s for s in scores if s is not None]
    return sum(parsed) / len(parsed) if parsed else NEUTRAL


def _pairs(text: str, tag: str) -> tuple[int, int]:
    return text.count(f"<{tag}>"), text.count(f"</{tag}>")


def tag_format(text: str, tag: str, wanted: int) -> float:
    """1 for exactly ``wanted`` ``<tag>`` pairs, 0.5 for more (as many opened as closed), else 0;
    an empty reply scores 0.5 (the released code's neutral value)."""
    if not text:
        return NEUTRAL
    opened, closed = _pairs(text, tag)
    if opened == closed == wanted:
        return 1.0
    return 0.5 if opened == closed and opened > wanted else 0.0


def solver_format(text: str) -> float:
    return tag_format(text, "answer", 1)


def judge_format(text: str) -> float:
    """The judge's whole reward: exactly three ``<score>`` pairs."""
    return tag_format(text, "score", 3)


def proposer_format(text: str) -> float:
    """The mean of the tag scores that apply, counted in the reply alone: ``<question>`` 1 for
    one pair, 0.5 for more, else 0; ``<answer>`` (only when present) 1 when there are as many
    as questions, else 0; ``<type>`` (only when present) 1 for one pair, 0.5 for more, else 0.
    (The released code counts 3-5 question tags, 2 answer tags as 1: its text holds the
    template's examples too; docs/algorithms.md#mae.)"""
    if not text:
        return NEUTRAL
    questions, closed = _pairs(text, "question")
    scores = [tag_format(text, "question", 1)]
    answers, answers_closed = _pairs(text, "answer")
    if answers or answers_closed:
        scores.append(1.0 if answers == answers_closed == questions == closed else 0.0)
    types, types_closed = _pairs(text, "type")
    if types or types_closed:
        scores.append(tag_format(text, "type", 1))
    return sum(scores) / len(scores)


def extract_question(text: str, lenient: bool = False) -> str | None:
    """The last ``<question>…</question>``'s text, stripped; None when there is none or it is
    empty. ``lenient`` (small models that run out of tokens): with no closed pair, the text
    after the last ``<question>`` up to the next tag or the end (its format score stays 0)."""
    found = [q.strip() for q in _QUESTION.findall(text)]
    if not found and lenient and "<question>" in text:
        found = [text.rsplit("<question>", 1)[1].split("<", 1)[0].strip()]
    return found[-1] if found and found[-1] else None


def extract_answer(text: str) -> str:
    """What the judge sees of a solver's reply: the last ``<answer>`` pair's text, or the whole
    reply when there is none (the released code falls back to the reply too)."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else text.strip()


def solver_reward(judged: float, text: str) -> float:
    """0.5 · mean judge(answer) + 0.5 · format."""
    return 0.5 * judged + 0.5 * solver_format(text)


@dataclass(frozen=True)
class ProposerReward:
    reward: float
    admitted: bool  # q ≥ the threshold: the question enters the pool


def proposer_reward(has_question: bool, quality: float, difficulty: float | None,
                    fmt: float, threshold: float = ADMIT) -> ProposerReward:
    """(q + d + f)/3 when q ≥ ``threshold`` (admitted), else (q + f)/3; 0 without a question.
    ``difficulty`` d = 1 − mean judge(answer), None when the question was not solved (only
    when it is not admitted)."""
    if not has_question:
        return ProposerReward(0.0, False)
    if quality >= threshold:
        if difficulty is None:
            raise ValueError("an admitted question's reward needs its difficulty d")
        return ProposerReward((quality + difficulty + fmt) / 3.0, True)
    return ProposerReward((quality + fmt) / 3.0, False)
