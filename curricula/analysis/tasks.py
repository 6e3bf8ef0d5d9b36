"""Task-level rates from ``tasks.jsonl`` rows (docs/run-folder.md): validity, answer-type mix,
degenerate answers, tool calls per task, and grouping by iteration or step."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable


def group_tasks(tasks: Iterable[dict], key: str = "iteration") -> dict[int, list[dict]]:
    """Tasks per iteration (falling back to step when a row has no iteration)."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for task in tasks:
        value = task.get(key)
        if value is None:
            value = task.get("step", 0)
        groups[int(value)].append(task)
    return dict(sorted(groups.items()))


def share(tasks: list[dict], predicate: Callable[[dict], bool]) -> float | None:
    return sum(bool(predicate(t)) for t in tasks) / len(tasks) if tasks else None


def validity_rate(tasks: list[dict]) -> float | None:
    return share(tasks, lambda t: t.get("valid") is True)


def answer_type_mix(tasks: list[dict]) -> dict[str, float]:
    """Share of each ``answer_type`` among valid tasks (``unknown`` where null)."""
    valid = [t for t in tasks if t.get("valid")]
    counts = Counter(t.get("answer_type") or "unknown" for t in valid)
    return {k: v / len(valid) for k, v in sorted(counts.items())} if valid else {}


def is_degenerate_answer(answer: str | None, question: str | None = None) -> str | None:
    """Why an answer is degenerate, or None: missing, empty, no letter or digit, over 200
    characters, or the question itself."""
    if answer is None:
        return "missing"
    text = str(answer).strip()
    if not text:
        return "empty"
    if not any(ch.isalnum() for ch in text):
        return "no letter or digit"
    if len(text) > 200:
        return "over 200 characters"
    if question is not None and text == str(question).strip():
        return "repeats the question"
    return None


def degenerate_rate(tasks: list[dict]) -> float | None:
    """Share of valid tasks whose own answer is degenerate."""
    valid = [t for t in tasks if t.get("valid")]
    return share(valid, lambda t: is_degenerate_answer(t.get("answer"), t.get("question")))


def top_answers(tasks: list[dict], count: int = 5) -> list[tuple[str, float]]:
    """The most frequent answers of valid tasks and their shares (mode collapse shows here:
    every task answered "2")."""
    answers = [str(t.get("answer")).strip() for t in tasks if t.get("valid")]
    if not answers:
        return []
    return [(a, c / len(answers)) for a, c in Counter(answers).most_common(count)]


def tool_calls_per_task(tasks: list[dict]) -> float | None:
    """Mean of the rows' ``tool_calls`` (mean calls per solver rollout), where logged."""
    values = [float(t["tool_calls"]) for t in tasks if _number(t.get("tool_calls"))]
    return sum(values) / len(values) if values else None


def tool_use_rate(tasks: list[dict]) -> float | None:
    """Share of tasks whose solver rollouts called the tool at least once on average > 0."""
    values = [float(t["tool_calls"]) for t in tasks if _number(t.get("tool_calls"))]
    return sum(v > 0 for v in values) / len(values) if values else None


def pseudo_label_accuracy(tasks: list[dict]) -> float | None:
    """Share of tasks whose majority pseudo-label equals the proposer's own answer, where both
    exist (a self-consistency proxy; the probe-set accuracy the loop logs is the real one)."""
    both = [t for t in tasks if t.get("pseudo_label") is not None and t.get("answer") is not None]
    return share(both, lambda t: str(t["pseudo_label"]).strip() == str(t["answer"]).strip())


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
