"""Self-consistency: majority pseudo-labels, pass rates p̂, and the band filters
(docs/algorithms.md#agent0).

The executor answers a proposed task k times; answers that are equal under symbolic equivalence
(Math-Verify, under a per-call timeout: ``curricula.answers.answers_equal``) form one class, so
``1/2``, ``0.5`` and ``\\frac{1}{2}`` vote together. ỹ is the largest class; p̂ is its share of
all k samples (unanswered samples count in the denominator, as in Agent0's code).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from curricula.answers import DEFAULT_VERIFY_TIMEOUT_S, answers_equal


def answer_classes(
    answers: Sequence[str | None], timeout_s: float = DEFAULT_VERIFY_TIMEOUT_S
) -> list[int | None]:
    """Equivalence-class index of each answer (None for no answer), classes numbered in order
    of first appearance. Each answer is compared with one representative per class."""
    representatives: list[str] = []
    classes: list[int | None] = []
    for answer in answers:
        if answer is None:
            classes.append(None)
            continue
        for index, representative in enumerate(representatives):
            if answers_equal(answer, representative, timeout_s):
                classes.append(index)
                break
        else:
            representatives.append(answer)
            classes.append(len(representatives) - 1)
    return classes


@dataclass(frozen=True)
class Consensus:
    """The executor's self-consistency on one task: ỹ, p̂, and whether a reference answer (the
    proposer's own) falls in ỹ's class (None when there is no reference or no ỹ)."""

    label: str | None
    p_hat: float
    agrees: bool | None = None


NO_REFERENCE = object()  # `consensus(..., reference=None)` means "the proposer gave no answer"


def consensus(
    answers: Sequence[str | None],
    reference: object = NO_REFERENCE,
    timeout_s: float = DEFAULT_VERIFY_TIMEOUT_S,
) -> Consensus:
    """ỹ, the majority class of ``answers`` (ties go to the class seen first), written as that
    class's most common spelling (first-seen among equals); p̂, its share of all samples
    (unanswered ones included). With a ``reference``, it is classified after the answers and
    ``agrees`` says whether it joined ỹ's class. No answer at all → (None, 0.0, None)."""
    with_reference = reference is not NO_REFERENCE
    classes = answer_classes([*answers, reference] if with_reference else answers, timeout_s)
    reference_class = classes.pop() if with_reference else None
    sizes = Counter(c for c in classes if c is not None)
    if not sizes:
        return Consensus(None, 0.0)
    best = max(sizes, key=lambda c: (sizes[c], -c))
    spellings = Counter(a for a, c in zip(answers, classes, strict=True) if c == best)
    label = max(spellings, key=lambda s: (spellings[s], -answers.index(s)))
    agrees = reference_class == best if with_reference else None
    return Consensus(label, sizes[best] / len(answers), agrees)


def majority_vote(
    answers: Sequence[str | None], timeout_s: float = DEFAULT_VERIFY_TIMEOUT_S
) -> tuple[str | None, float]:
    """(ỹ, p̂) of ``consensus``."""
    vote = consensus(answers, timeout_s=timeout_s)
    return vote.label, vote.p_hat


def in_band_paper(p_hat: float, delta: float = 0.25) -> bool:
    """Agent0 paper filter: keep a task when |p̂ − ½| ≤ δ (δ = 0.25 → 0.25 ≤ p̂ ≤ 0.75)."""
    return abs(p_hat - 0.5) <= delta + 1e-12  # p̂ is a share of k: keep exact edges inside


def in_band_code(p_hat: float, lo: float = 0.3, hi: float = 0.8) -> bool:
    """Released Agent0 code filter: keep 0.3 ≤ p̂ ≤ 0.8 (edges included)."""
    if lo > hi:
        raise ValueError(f"band lo {lo} > hi {hi}")
    return lo - 1e-12 <= p_hat <= hi + 1e-12
