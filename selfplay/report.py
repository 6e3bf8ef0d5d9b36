"""Plots (PNG) and an HTML report of a run, written to ``runs/<run>/report/``."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

PANELS = [
    ("reward", ("reward/",), "training reward per role"),
    (
        "accuracy",
        ("rollout/accuracy", "rollout/boxed_rate", "rollout/answered_rate"),
        "rollout accuracy and format",
    ),
    ("games", ("game/",), "games: invalid, draw, parse failures"),
    ("eval", ("eval/",), "evaluation"),
    ("learner", ("train/loss", "train/grad_norm", "train/entropy", "train/clip_frac"), "learner"),
    ("mismatch", ("train/mismatch",), "engine vs trainer log-prob mismatch"),
    ("speed", ("rollout/tokens_per_s", "train/tokens_per_s", "time/step_seconds"), "speed"),
]


def _series(rows: list[dict], prefixes: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            if key.startswith(prefixes) and isinstance(value, int | float):
                if key.startswith("eval/") and key.count("/") > 3:
                    continue  # per-seat eval rows stay in metrics.jsonl, not in the plot
                series[key].append((row["step"], float(value)))
    return series


def write_report(run_dir: Path, rows: list[dict]) -> Path | None:
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    figures = []
    for name, prefixes, title in PANELS:
        series = _series(rows, prefixes)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for key, points in sorted(series.items())[:12]:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=key)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=110)
        plt.close(fig)
        figures.append((name, title))
    last = rows[-1]
    table = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>"
        for k, v in sorted(last.items())
        if isinstance(v, int | float)
    )
    images = "".join(f"<h2>{html.escape(t)}</h2><img src='{n}.png'>" for n, t in figures)
    (out / "index.html").write_text(
        f"<html><head><meta charset='utf-8'><title>{html.escape(run_dir.name)}</title></head>"
        f"<body><h1>{html.escape(run_dir.name)}</h1>{images}<h2>last row</h2>"
        f"<table>{table}</table></body></html>"
    )
    return out
