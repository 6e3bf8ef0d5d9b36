"""What Agent0 records beside the algorithm: episode ``info``, ``tasks.jsonl`` rows, the pool
file, and the metrics of each phase, of the pool and of the probe set."""

from __future__ import annotations

import dataclasses

from curricula.answers import grade_answer
from curricula.consistency import consensus
from curricula.proposals import Proposal, degenerate
from selfplay.loops.agent0.kinds import ScoredTask
from selfplay.loops.propose import mean
from selfplay.types import Episode, TaskRow

P_HAT_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # histogram edges of the pool's p̂


def task_info(task: ScoredTask, step: int, iteration: int, phase: str, task_id: str) -> dict:
    """The ``info`` of a curriculum episode: the proposal and how the executor did on it."""
    proposal = task.proposal
    return {
        "step": step,
        "iteration": iteration,
        "phase": phase,
        "task_id": task_id,
        "valid": proposal.valid,
        "why_invalid": proposal.why_invalid,
        "question": proposal.question,
        "proposer_answer": proposal.answer,
        "pseudo_label": task.label,
        "p_hat": task.p_hat if proposal.valid else None,
        "agrees": task.agrees,
        "tool_calls": task.tool_calls if task.solves else None,
        "solver_answers": [s.answer for s in task.solves],
    }


def task_row(
    task: ScoredTask, step: int, iteration: int, phase: str, task_id: str, kind: str,
    reward: float | None, kept: bool | None,
) -> TaskRow:
    """One row of ``tasks.jsonl``."""
    proposal = task.proposal
    return TaskRow(
        step=step,
        iteration=iteration,
        phase=phase,
        loop="agent0",
        kind=kind,
        task_id=task_id,
        question=proposal.question or proposal.text,
        answer=proposal.answer,
        answer_type=proposal.answer_type,
        valid=proposal.valid,
        pseudo_label=task.label if proposal.kind == "qa" else None,
        p_hat=task.p_hat if proposal.valid else None,
        samples=len(task.solves),
        solver_answers=[s.answer for s in task.solves],
        tool_calls=task.tool_calls if task.solves else None,
        reward=reward,
        kept=kept,
    )


def pool_record(row: TaskRow, repetition: float | None) -> dict:
    """A line of ``pools/iter-K.jsonl``: the task row and its repetition share."""
    return dataclasses.asdict(row) | {"repetition": repetition}


def curriculum_metrics(episodes: list[Episode], in_band, qa: bool) -> dict[str, float]:
    """A curriculum step: validity, p̂, the band, repetition, the executor's tool calls."""
    infos = [e.info for e in episodes]
    valid = [i for i in infos if i["valid"]]
    metrics = {
        "agent0/curriculum/valid_rate": len(valid) / len(infos),
        "agent0/curriculum/p_hat": mean([i["p_hat"] for i in valid]),
        "agent0/curriculum/in_band": mean([in_band(i["p_hat"]) for i in valid]),
        "agent0/curriculum/repetition": mean([i["repetition"] for i in valid]),
        "agent0/curriculum/executor_tool_calls": mean([i["tool_calls"] for i in valid]),
        "agent0/curriculum/reward_valid": mean([i["reward"] for i in valid]),
    }
    if qa:
        metrics["agent0/curriculum/agreement"] = mean([i["agrees"] is True for i in valid])
    return metrics


def executor_metrics(episodes: list[Episode]) -> dict[str, float]:
    """An executor step: accuracy against the labels, tool use, degenerate answers, p̂."""
    infos = [e.info for e in episodes]
    return {
        "agent0/executor/accuracy": mean([e.correct for e in episodes]),
        "agent0/executor/tool_calls": mean([i["tool_calls"] for i in infos]),
        "agent0/executor/tool_use_rate": mean([i["tool_calls"] > 0 for i in infos]),
        "agent0/executor/degenerate_rate": mean([degenerate(i["answer"]) for i in infos]),
        "agent0/executor/p_hat": mean([e.pass_rate for e in episodes]),
    }


def pool_metrics(
    tasks: list[ScoredTask], kept: list[dict], records: list[dict], probe_tasks: int,
    seconds: float, qa: bool,
) -> dict[str, float]:
    """A new task pool: validity, what the band kept, repetition, tool calls, the p̂
    histogram, and how fast tasks were scored."""
    valid_tasks = [t for t in tasks if t.proposal.valid]
    solves = [solve for t in valid_tasks for solve in t.solves]
    metrics = {
        "agent0/pool/size": float(len(tasks)),
        "agent0/pool/valid_rate": sum(t.proposal.valid for t in tasks) / max(len(tasks), 1),
        "agent0/pool/kept": float(len(kept)),
        "agent0/pool/kept_share": len(kept) / max(len(valid_tasks), 1),
        "agent0/pool/repetition_share": mean([r["repetition"] for r in records if r["repetition"]]),
        "agent0/pool/tool_calls_per_rollout": mean([s.tool_calls for s in solves]),
        "agent0/pool/degenerate_rate": mean([degenerate(s.answer) for s in solves]),
        "agent0/pool/p_hat": mean([t.p_hat for t in valid_tasks]),
        # tasks scored for p̂ (k samples each, pool and probe together) per minute
        "agent0/pool/tasks_per_minute": 60 * (len(valid_tasks) + probe_tasks) / max(seconds, 1e-9),
    }
    if qa:
        metrics["agent0/pool/agreement"] = mean([t.agrees is True for t in valid_tasks])
    for low, high in zip(P_HAT_BINS, P_HAT_BINS[1:], strict=False):
        last = high == P_HAT_BINS[-1]
        share = mean([low <= t.p_hat < high or (last and t.p_hat == high) for t in valid_tasks])
        metrics[f"agent0/pool/p_hat_hist_{low:.1f}_{high:.1f}"] = share
    return metrics


def probe_metrics(probe: list, solves: list[list], timeout_s: float) -> dict[str, float]:
    """Pseudo-label accuracy on the labelled probe set: the executor's consensus on each item
    (its k answers, ``solves``) against the item's gold (R-Zero's 79% → 63% decay is measured
    this way)."""
    labels = []
    for task, group in zip(probe, solves, strict=True):
        vote = consensus([s.answer for s in group], timeout_s=timeout_s)
        correct = vote.label is not None and grade_answer(
            f"\\boxed{{{vote.label}}}", task.entry, task.dataset)["correct"]
        labels.append((ScoredTask(Proposal("", True), p_hat=vote.p_hat), correct))
    return {
        "agent0/probe/pseudo_label_accuracy": mean([correct for _, correct in labels]),
        "agent0/probe/p_hat": mean([task.p_hat for task, _ in labels]),
        "agent0/probe/tasks": float(len(labels)),
    }
