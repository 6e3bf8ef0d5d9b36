"""What an analysis page is made of: a ``Section`` (its plots, tables and lines), a ``Table``,
the page ``Options``, and what every section draws with: ``fmt`` for a cell, ``numeric_series``
of metrics.jsonl keys, ``is_rate`` for a 0–1 axis, ``line_plot`` for curves per step.

The sections themselves, by the part of the page they draw: ``metric_sections`` (training
curves, other metrics, the compute curve, held-out evaluations), ``task_sections`` (difficulty,
validity, diversity, pseudo-labels), ``game_sections`` (games, response length, transcripts);
``page.build_sections`` puts them in order. Each is built from what the run folder holds; a
section whose data is absent becomes one line saying so (never an empty plot): an rlvr or SPIRAL
run has no ``tasks.jsonl`` and so no task sections; a killed run shows what it wrote.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from selfplay.analysis.plots import Plot, Series
from selfplay.stats.ratings import LADDER


@dataclass
class Table:
    caption: str
    headers: list[str]
    rows: list[list]


@dataclass
class Section:
    title: str
    anchor: str
    plots: list[Plot] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # findings and "why this is missing" notes
    html: list[str] = field(default_factory=list)  # blocks already escaped (transcripts)

    def note(self, line: str) -> Section:
        """Say why the section has nothing more to show (and return it, finished)."""
        self.lines.append(line)
        return self

    def add(self, plot: Plot, missing: str | None = None) -> None:
        """Keep a plot that has data; otherwise note why it is not there."""
        if plot.empty:
            if missing:
                self.lines.append(missing)
            return
        self.plots.append(plot)


@dataclass
class Options:
    embeddings: bool = True  # MiniLM embeddings for dispersion/clusters/near-duplicates
    max_texts: int = 300  # per iteration, for BLEU and embeddings (seeded sample)
    near_duplicate: float = 0.95  # cosine similarity that counts as a near duplicate
    cluster_threshold: float = 0.5  # BLEU and embedding cluster cut
    pngs: bool = True  # also save every figure as a PNG (slow-ish: ~0.1–0.3 s each)


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        return f"{value:.{digits}f}"
    return str(value)


RATE_WORDS = ("accuracy", "rate", "win", "draw", "loss", "invalid", "share", "frac")


def is_rate(key: str, values: list[float]) -> bool:
    """A 0–1 quantity (drawn on a fixed 0–1 axis): every value lies in [0, 1] and the name says
    rate, accuracy, share or an evaluation outcome. Learner losses are never rates."""
    if not all(0.0 <= v <= 1.0 for v in values):
        return False
    last = key.rsplit("/", 1)[-1]
    if key.startswith("train/"):
        return last == "clip_frac"
    return key.startswith("eval/") or any(word in last for word in RATE_WORDS)


EXPLOITABILITY = "eval/exploitability/"  # spiral.eval_exploitability's keys


def numeric_series(rows: list[dict], prefixes: tuple[str, ...]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            if not key.startswith(prefixes) or isinstance(value, bool):
                continue
            if key.startswith("eval/") and key.count("/") > 3:
                continue  # per-seat evaluation rows: the games section shows them
            if key.startswith((EXPLOITABILITY, LADDER)):
                continue  # the games section draws them (the interval; the ladder's table)
            if isinstance(value, int | float) and math.isfinite(value):
                out[key].append((row["step"], float(value)))
    return dict(sorted(out.items()))


def line_plot(name, title, ylabel, series: dict[str, list[tuple]], rate=False,
              xlabel="step") -> Plot:
    """One curve per series, against the step unless ``xlabel`` says otherwise."""
    return Plot(
        name, title, xlabel, ylabel,
        [Series(k, [x for x, _ in v], [y for _, y in v]) for k, v in series.items()],
        rate=rate,
    )

