"""Answer extraction and verification shared by every loop that grades text answers.

Parsing is *lenient but honest*: the model's answer is the content of its last ``\\boxed{...}``;
with ``lenient=True`` and no box, the last number it wrote counts as its answer (small models
rarely box). Nothing else is guessed: a response without either has no answer.
"""

from __future__ import annotations

import re
from collections import Counter

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed), or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start : i - 1].strip()
    return None


def extract_answer(text: str, lenient: bool = False) -> tuple[str | None, bool]:
    """(answer, was_boxed). Lenient mode falls back to the last number in the text."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed, True
    if lenient:
        numbers = _NUMBER.findall(text)
        if numbers:
            return numbers[-1].replace(",", ""), False
    return None, False


def answers_equal(predicted: str | None, gold: str) -> bool:
    """Exact match after normalising whitespace, else Math-Verify equivalence."""
    if predicted is None:
        return False
    if " ".join(predicted.split()).lower() == " ".join(str(gold).split()).lower():
        return True
    try:
        from math_verify import parse, verify

        return bool(verify(parse(f"${gold}$"), parse(f"${predicted}$")))
    except Exception:  # math-verify raises on unparsable input: not equal
        return False


def majority_vote(answers: list[str | None]) -> tuple[str | None, float]:
    """(majority answer ỹ, p̂ = share of all samples equal to ỹ); unanswered samples count in p̂."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0.0
    answer, count = counts.most_common(1)[0]
    return answer, count / len(answers)


def grade_answer(text: str, entry: dict, dataset, lenient: bool = False) -> dict:
    """Grade a response to a reasoning-gym entry: its verifier first, then Math-Verify.

    Returns answer, boxed, score (the verifier's, in [0, 1]) and correct (score 1).
    """
    answer, boxed = extract_answer(text, lenient=lenient)
    score = 0.0
    if answer is not None:
        try:
            score = float(dataset.score_answer(answer, entry))
        except Exception:  # a verifier that chokes on odd model output scores it 0
            score = 0.0
        if score < 1.0 and answers_equal(answer, str(entry["answer"])):
            score = 1.0
    return {"answer": answer, "boxed": boxed, "score": score, "correct": score >= 1.0}
