"""An LLM judge for free-form answers, bias-corrected (arXiv 2511.21140;
docs/algorithms.md#bias-corrected-llm-as-judge).

The judge (the ``judge`` role prompt) says yes/no for (question, reference, response). Its raw
"yes" share p̂ is biased by its errors; a labelled calibration set (JSONL rows ``question``,
``reference``, ``response``, ``label`` true/false) gives its specificity q₀ and sensitivity q₁,
and ``selfplay.stats.judge`` corrects: θ̂ = (p̂ + q₀ − 1)/(q₀ + q₁ − 1) with a delta-method
interval. A judge no better than chance (q₀ + q₁ ≤ 1) is refused in one line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from curricula.answers import last_boxed
from roles import load_role
from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows
from selfplay.loops.base import prompt_request
from selfplay.stats.judge import (
    JudgeCalibrationError,
    JudgeEstimate,
    counts_from_labels,
    judge_estimate,
)
from selfplay.types import SamplingParams


def parse_verdict(text: str) -> bool:
    """The judge's last ``\\boxed{yes|no}`` (or a bare final yes/no); anything else is "no"."""
    boxed = last_boxed(text)
    word = (boxed if boxed is not None else (text.strip().split() or [""])[-1]).strip(" .!*")
    return word.lower() in ("yes", "correct", "true")


def load_calibration(path: Path) -> list[dict]:
    rows = []
    for number, row in read_rows(path, what="judge calibration file"):
        missing = [k for k in ("question", "reference", "response", "label") if k not in row]
        if missing:
            raise UserError(f"{path}:{number}: missing key {missing[0]!r}")
        rows.append(row)
    return rows


async def _verdict(policy, adapter: str, question: str, reference: str, response: str) -> bool:
    request = prompt_request(
        load_role("judge"), "judge", adapter, SamplingParams(temperature=0.0, max_new_tokens=32),
        question=question, reference=reference, response=response,
    )
    return parse_verdict((await policy(request)).reply)


def verdicts(policy, adapter: str, items: list[tuple[str, str, str]]) -> list[bool]:
    """The judge's yes/no for each (question, reference, response), greedy."""
    return asyncio.run(policy.gather(_verdict(policy, adapter, *item) for item in items))


def corrected(calibration: list[dict], calibration_verdicts: list[bool],
              test_verdicts: list[bool]) -> JudgeEstimate:
    """θ̂ with its interval; a one-line UserError when the judge cannot be corrected."""
    labels = [bool(row["label"]) for row in calibration]
    counts = counts_from_labels(list(zip(labels, calibration_verdicts, strict=True)),
                                test_verdicts)
    try:
        return judge_estimate(counts)
    except JudgeCalibrationError as exc:
        raise UserError(str(exc)) from exc
