"""One figure, drawn twice: a PNG (matplotlib, for papers) and an interactive chart for the page
(``Plot.chart``: the data plots.js draws with uPlot).

A ``Plot`` holds one quantity (or several of the same unit): rates get a fixed 0–1 axis,
counts and lengths their own. A plot with no data point is never drawn: ``Plot.empty`` lets a
section skip it with a note instead.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Series:
    label: str
    x: list
    y: list
    mode: str = "lines+markers"  # or "lines", "markers" (scatter), "bar" (bars)
    dash: bool = False
    band: tuple[list, list] | None = None  # (low, high) per x: a shaded interval around y


@dataclass
class Plot:
    name: str  # file stem, unique within a page
    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    rate: bool = False  # a 0–1 axis
    log_x: bool = False
    heatmap: tuple[list, list, list[list[float]]] | None = None  # (x labels, y labels, z[y][x])
    zlabel: str = ""
    png: bool = True  # also saved as a PNG next to the page

    @property
    def empty(self) -> bool:
        if self.heatmap is not None:
            return not self.heatmap[2] or not any(len(row) for row in self.heatmap[2])
        return not any(_finite_points(s) for s in self.series)

    # ---------------------------------------------------------------- the page (uPlot)
    def chart(self) -> dict:
        """The figure as plots.js draws it with uPlot: one shared x array per chart, every
        series aligned to it (null where a series has no value; plots.js joins a line across
        them). Bars and non-numeric x are categorical: x is the index, ``xLabels`` the ticks."""
        spec = {"title": self.title, "xlabel": self.xlabel, "ylabel": self.ylabel,
                "rate": self.rate}
        if self.heatmap is not None:
            xs, ys, z = self.heatmap
            return {**spec, "kind": "heatmap", "xLabels": [str(x) for x in xs],
                    "yLabels": [str(y) for y in ys], "zlabel": self.zlabel,
                    "z": [[_number(v) for v in row] for row in z]}
        kept = []  # (series, its finite points, its band by x)
        for s in self.series:
            points = _finite_points(s)
            if self.log_x:  # a log axis has no place for x <= 0
                points = [p for p in points if _numeric(p[0]) and p[0] > 0]
            if points:  # a series with no data gets no legend entry either
                kept.append((s, points, _band_points(s)))
        xs = [x for _, points, _ in kept for x, _ in points]
        categorical = any(s.mode == "bar" for s, _, _ in kept) or not all(map(_numeric, xs))
        order = list(dict.fromkeys(xs))
        if all(map(_numeric, order)):
            order.sort()
        # rows per x: as many as the series with the most points at that x (duplicates kept)
        by_x = [(defaultdict(list), defaultdict(list)) for _ in kept]
        for (_, points, band), (values, intervals) in zip(kept, by_x, strict=True):
            for x, y in points:
                values[x].append(y)
            for x, low, high in band:
                intervals[x].append((low, high))
        x_out, rows = [], []
        for position, x in enumerate(order):
            for k in range(max(len(values.get(x, ())) for values, _ in by_x)):
                x_out.append(position if categorical else x)
                rows.append((x, k))
        series = []
        for index, ((s, _, band), (values, intervals)) in enumerate(zip(kept, by_x, strict=True)):
            entry = {"label": s.label, "mode": s.mode, "color": PALETTE[index % len(PALETTE)],
                     "y": [_at(values, x, k) for x, k in rows]}
            if s.dash:
                entry["dash"] = True
            if band:
                pairs = [_at(intervals, x, k) for x, k in rows]
                entry["low"] = [p and _number(p[0]) for p in pairs]
                entry["high"] = [p and _number(p[1]) for p in pairs]
            series.append(entry)
        spec |= {"kind": "xy", "x": x_out, "series": series, "logX": self.log_x,
                 "integerX": not categorical and not self.log_x and self._integer_x()}
        if categorical:
            spec["xLabels"] = [str(x) for x in order]
        return spec

    def _integer_x(self) -> bool:
        xs = [x for s in self.series for x, _ in _finite_points(s)]
        return bool(xs) and all(isinstance(x, int) for x in xs) and max(xs) - min(xs) <= 20

    # ---------------------------------------------------------------- matplotlib
    def save_png(self, folder: Path) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        fig, ax = plt.subplots(figsize=(7, 3.6))
        if self.heatmap is not None:
            xs, ys, z = self.heatmap
            values = np.array([[np.nan if v is None else v for v in row] for row in z],
                              dtype=float)
            limits = {"vmin": 0.0, "vmax": 1.0} if self.rate else {}
            image = ax.imshow(values, aspect="auto", origin="lower", cmap="viridis", **limits)
            if values.size <= 100:  # small matrices (cross-play): the numbers themselves
                for (row, col), value in np.ndenumerate(values):
                    if np.isfinite(value):
                        ax.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=8,
                                color="white" if value < 0.5 * np.nanmax(values) else "black")
            ax.set_xticks(range(len(xs)), [str(x) for x in xs], fontsize=7,
                          rotation=90 if len(xs) > 12 else 0)
            ax.set_yticks(range(len(ys)), [str(y) for y in ys], fontsize=7)
            fig.colorbar(image, ax=ax, label=self.zlabel)
        else:
            bars = [s for s in self.series if s.mode == "bar"]
            width = 0.8 / max(len(bars), 1)
            for s in self.series:
                points = _finite_points(s)
                if not points:
                    continue
                x, y = zip(*points, strict=True)
                if s.mode == "bar":
                    index = bars.index(s)
                    positions = np.arange(len(x)) + (index - (len(bars) - 1) / 2) * width
                    ax.bar(positions, y, width=width, label=s.label)
                    ax.set_xticks(range(len(x)), [str(v) for v in x], fontsize=7)
                else:
                    marker = "o" if "markers" in s.mode else None
                    style = "" if "lines" in s.mode else "none"
                    (line,) = ax.plot(x, y, marker=marker, ms=3, label=s.label,
                                      linestyle="--" if s.dash else (style or "-"))
                    band = _band_points(s)
                    if band:
                        bx, low, high = zip(*band, strict=True)
                        ax.fill_between(bx, low, high, color=line.get_color(), alpha=0.2,
                                        linewidth=0)
            if self.rate:
                ax.set_ylim(-0.02, 1.02)
            if self.log_x:
                ax.set_xscale("log")
            elif self._integer_x():
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if len(self.series) > 1:
                ax.legend(fontsize=7, loc="best")
            ax.grid(alpha=0.3)
        ax.set_title(self.title, fontsize=10)
        ax.set_xlabel(self.xlabel)
        ax.set_ylabel(self.ylabel)
        fig.tight_layout()
        path = folder / f"{self.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


# one colour per series, in order (a band takes the colour of its line)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def _band_points(series: Series) -> list[tuple]:
    """(x, low, high) where the series has a finite band."""
    if series.band is None:
        return []
    low, high = series.band
    return [(x, lo, hi) for x, lo, hi in zip(series.x, low, high, strict=False)
            if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi)]


def _at(values: dict, x, k: int):
    found = values.get(x, ())
    return found[k] if k < len(found) else None


def _numeric(value) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool)


def _number(value):
    """A JSON number, or None for a missing or non-finite one."""
    if value is None or (_numeric(value) and not np.isfinite(value)):
        return None
    return value


def _finite_points(series: Series) -> list[tuple]:
    points = []
    for x, y in zip(series.x, series.y, strict=False):
        if y is None or (isinstance(y, float) and not np.isfinite(y)):
            continue
        points.append((x, y))
    return points

