"""The short summary printed at the end of a run (and by ``selfplay analyze``)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def curve_summary(rows: list[dict], key: str, window: int = 5) -> tuple[float | None, float | None]:
    """Mean of ``key`` over the first and the last ``window`` training rows."""
    values = [r[key] for r in rows if key in r and not r.get("final")]
    return _mean(values[:window]), _mean(values[-window:])


def print_summary(run_dir: Path, rows: list[dict], report: bool = True) -> None:
    console = Console()
    table = Table(title=f"summary: {run_dir}")
    table.add_column("metric")
    table.add_column("first 5 steps", justify="right")
    table.add_column("last 5 steps", justify="right")
    keys = sorted(
        {
            k
            for r in rows
            for k in r
            if k.startswith(("reward/", "rollout/accuracy", "rollout/boxed", "game/"))
        }
    )
    for key in keys:
        first, last = curve_summary(rows, key)
        table.add_row(key, _fmt(first), _fmt(last))
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    if len(evals) >= 1:
        before, after = evals[0], evals[-1]
        for key in sorted(k for k in before if k.startswith("eval/") and "/seat" not in k):
            table.add_row(f"{key} (before → after)", _fmt(before.get(key)), _fmt(after.get(key)))
    console.print(table)
    console.print(f"metrics: {run_dir / 'metrics.jsonl'}")
    console.print(f"episodes: {run_dir / 'episodes'}")
    if report:
        console.print(f"plots and report: {run_dir / 'report' / 'index.html'}")
