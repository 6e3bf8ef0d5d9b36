"""Search Self-Play's rules (Lu et al. 2025, arXiv:2510.18821; docs/algorithms.md#ssp): the
answer and question tags, the proposer's validity checks, and the solver's reward (the
proposer's is p̂-shaped: ``inverse_accuracy`` and ``intermediate_difficulty`` in
``curricula/rewards.py``).

Pure functions of text and counts (no model, no corpus), after the released code:
``quarl/utils/problem_extraction.py`` (validity), ``quarl/reward/score/quark_score.py`` (solver)
and ``quarl/trainer/ppo/ssp_ray_trainer.py`` (proposer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from curricula.answers import normalise_text

MAX_ANSWER_TAGS = 10  # more <answer> tags than this: the solver's reward is divided by 4
# a retrieved block (the search tool always closes the blocks it appends)
_INFORMATION = re.compile(r"<information>.*?</information>", re.DOTALL)


def tag_contents(text: str, tag: str) -> list[str]:
    """The stripped contents of every closed ``<tag>…</tag>`` in ``text``, in order."""
    return [m.strip() for m in re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)]


def last_tag(text: str, tag: str) -> str | None:
    """The last closed ``<tag>…</tag>``'s content, or None."""
    found = tag_contents(text, tag)
    return found[-1] if found else None


def without_information(reply: str) -> str:
    """The reply without its ``<information>`` blocks: what the model wrote, so a tag inside a
    retrieved document is never read as the model's question or answer."""
    return _INFORMATION.sub("", reply)


def proposed_question(reply: str, lenient: bool = False) -> str | None:
    """The proposal's question: the last ``<question>…</question>`` the model wrote; leniently,
    a question tag left open (the token budget ran out) counts up to the next tag or blank
    line."""
    written = without_information(reply)
    closed = last_tag(written, "question")
    if closed is not None or not lenient:
        return closed
    _, opened, text = written.rpartition("<question>")
    text = re.split(r"<|\n\s*\n", text, maxsplit=1)[0].strip() if opened else ""
    return " ".join(text.split()) or None


def exact_match(predicted: str | None, target: str) -> bool:
    """Normalised exact match (lower case, no punctuation or articles, single spaces), as
    SQuAD's ``normalize_answer`` that the released code uses."""
    return predicted is not None and bool(normalise_text(target)) and (
        normalise_text(predicted) == normalise_text(target)
    )


def solver_answer(reply: str) -> str | None:
    """The model's last ``<answer>…</answer>`` (none inside retrieved information)."""
    return last_tag(without_information(reply), "answer")


def solver_reward(reply: str, target: str) -> float:
    """1 when the model's last ``<answer>`` (none inside retrieved information) matches
    ``target``, 0 with no answer or a wrong one; divided by 4 when the model wrote more than
    ``MAX_ANSWER_TAGS`` answer tags."""
    answers = tag_contents(without_information(reply), "answer")
    if not answers:
        return 0.0
    reward = 1.0 if exact_match(answers[-1], target) else 0.0
    return reward / 4 if len(answers) > MAX_ANSWER_TAGS else reward


@dataclass(frozen=True)
class QuestionRules:
    """The proposer's validity thresholds (the paper's defaults; the CPU experiment relaxes
    some and says so)."""

    min_chars: int = 10
    max_chars: int = 1000
    min_words: int = 10
    min_searches: int = 2


def question_problem(
    question: str | None,
    target: str,
    search_queries: list[str],
    retrieved: int,
    rules: QuestionRules = QuestionRules(),
) -> str:
    """Why a proposal is invalid ("" when it passes every check before the RAG check): no
    question, its length in characters or words, the target inside it, too few searches, a
    repeated query, or no retrieved information."""
    if question is None:
        return "no question"
    if not rules.min_chars <= len(question) <= rules.max_chars:
        return "length"
    if len(question.split()) < rules.min_words:
        return "too few words"
    if normalise_text(target) and f" {normalise_text(target)} " in f" {normalise_text(question)} ":
        return "contains the answer"
    if len(search_queries) < rules.min_searches:
        return "too few searches"
    normalised = [q.lower() for q in search_queries]
    if len(set(normalised)) < len(normalised):
        return "repeated query"
    if retrieved == 0:
        return "no retrieved information"
    return ""
