"""One figure, drawn twice: a PNG (matplotlib, for papers) and a plotly chart for the page.

A ``Plot`` holds one quantity (or several of the same unit): rates get a fixed 0–1 axis,
counts and lengths their own. A plot with no data point is never drawn: ``Plot.empty`` lets a
section skip it with a note instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Series:
    label: str
    x: list
    y: list
    mode: str = "lines+markers"  # plotly mode; "markers" for scatter, "bar" for bars
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

    # ---------------------------------------------------------------- plotly
    def plotly_figure(self) -> dict:
        layout = {
            "title": {"text": self.title, "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
            "xaxis": {"title": {"text": self.xlabel}},
            "yaxis": {"title": {"text": self.ylabel}},
            "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
            "height": 340,
            "legend": {"font": {"size": 10}},
        }
        if self.rate:
            layout["yaxis"]["range"] = [-0.02, 1.02]
        if self.log_x:
            layout["xaxis"]["type"] = "log"
        elif self._integer_x():
            layout["xaxis"]["dtick"] = 1  # steps and iterations: no 0.5 ticks
        if self.heatmap is not None:
            xs, ys, z = self.heatmap
            data = [
                {
                    "type": "heatmap",
                    "x": [str(x) for x in xs],
                    "y": [str(y) for y in ys],
                    "z": z,
                    "colorscale": "Viridis",
                    **({"zmin": 0, "zmax": 1} if self.rate else {}),
                    "colorbar": {"title": {"text": self.zlabel}},
                    "hovertemplate": f"{self.xlabel} %{{x}}<br>{self.ylabel} %{{y}}"
                    f"<br>{self.zlabel} %{{z}}<extra></extra>",
                }
            ]
            layout["xaxis"]["type"] = "category"
            layout["yaxis"]["type"] = "category"
            layout["yaxis"].pop("range", None)  # a 0–1 heatmap scales its colours, not its axis
            return {"data": data, "layout": layout}
        data = []
        banded = any(s.band is not None for s in self.series)
        for index, s in enumerate(self.series):
            points = _finite_points(s)
            if not points:  # a series with no data gets no legend entry either
                continue
            x, y = [p[0] for p in points], [p[1] for p in points]
            if s.mode == "bar":
                data.append({"type": "bar", "name": s.label, "x": list(x), "y": list(y)})
            else:
                trace = {"type": "scatter", "mode": s.mode, "name": s.label,
                         "x": list(x), "y": list(y)}
                if s.dash:
                    trace["line"] = {"dash": "dash"}
                if banded:  # bands take the colour of their line: name every colour
                    colour = PALETTE[index % len(PALETTE)]
                    trace["line"] = {**trace.get("line", {}), "color": colour}
                    trace["marker"] = {"color": colour}
                    trace["legendgroup"] = f"series-{index}"
                    data += _band_traces(s, colour, f"series-{index}")
                data.append(trace)
        return {"data": data, "layout": layout}

    def _integer_x(self) -> bool:
        xs = [x for s in self.series for x, _ in _finite_points(s)]
        return bool(xs) and all(isinstance(x, int) for x in xs) and max(xs) - min(xs) <= 20

    def plotly_json(self) -> str:
        return json.dumps(self.plotly_figure(), default=_jsonable)

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


# plotly's default colour sequence: named explicitly where a band must match its line
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def _band_points(series: Series) -> list[tuple]:
    """(x, low, high) where the series has a finite band."""
    if series.band is None:
        return []
    low, high = series.band
    return [(x, lo, hi) for x, lo, hi in zip(series.x, low, high, strict=False)
            if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi)]


def _band_traces(series: Series, colour: str, group: str) -> list[dict]:
    """The band as a closed polygon (x forward along the top, back along the bottom)."""
    band = _band_points(series)
    if not band:
        return []
    x = [p[0] for p in band]
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return [{"type": "scatter", "mode": "lines", "name": f"{series.label} (95% interval)",
             "x": x + x[::-1], "y": [p[2] for p in band] + [p[1] for p in band][::-1],
             "fill": "toself", "fillcolor": f"rgba({red},{green},{blue},0.18)",
             "line": {"width": 0, "color": colour}, "hoverinfo": "skip", "showlegend": False,
             "legendgroup": group}]


def _finite_points(series: Series) -> list[tuple]:
    points = []
    for x, y in zip(series.x, series.y, strict=False):
        if y is None or (isinstance(y, float) and not np.isfinite(y)):
            continue
        points.append((x, y))
    return points


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
