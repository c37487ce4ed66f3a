# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""PNG plots of the HTML report, drawn with matplotlib's Agg backend (no display needed).

matplotlib is imported only when a plot is drawn, so the rest of the report (and the
workload, which shares this package) works without it; :class:`PlotUnavailable` says why
a plot could not be drawn. Every function returns the PNG's bytes.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

# One colour per series, colour-blind safe (Okabe-Ito), the same order in every plot.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PASS_COLOUR = "#009E73"
FAIL_COLOUR = "#D55E00"
SKIP_COLOUR = "#999999"


class PlotUnavailable(RuntimeError):
    """The plot cannot be drawn here (matplotlib missing)."""


def use_cache_dir(path: str | None) -> None:
    """Keep matplotlib's font cache in ``path`` (e.g. the project's .cache/matplotlib) instead
    of ~/.cache/matplotlib. Only before matplotlib is first imported, and only when the user has
    not chosen a folder (MPLCONFIGDIR) already."""
    if path and "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR"):
        os.makedirs(path, exist_ok=True)
        os.environ["MPLCONFIGDIR"] = path


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailable("matplotlib is not installed in the control venv "
                              "(pip install -r requirements.txt)") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    # No software/date metadata: the same data gives the same bytes.
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    import matplotlib.pyplot as plt
    plt.close(fig)
    return buf.getvalue()


def lines(panels: Sequence[Mapping[str, Any]], width: float = 7.5, height: float = 3.0) -> bytes:
    """Line plots side by side, one panel each.

    A panel: ``{"title", "xlabel", "ylabel", "series": [{"label", "x": [...], "y": [...]}],
    "logx": bool (base 2), "steps": bool (a rate over the interval ending at x), "integer_x": bool,
    "hline": (value, label) or None}``.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(width if len(panels) <= 2 else width * len(panels) / 2, height),
                             squeeze=False, layout="constrained")
    for ax, panel in zip(axes[0], panels):
        for i, s in enumerate(panel.get("series", [])):
            ax.plot(s["x"], s["y"], marker="o", markersize=3, linewidth=1.5,
                    drawstyle="steps-pre" if panel.get("steps") else "default",
                    color=COLOURS[i % len(COLOURS)], label=s.get("label"))
        if panel.get("integer_x"):
            from matplotlib.ticker import MaxNLocator
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if panel.get("logx"):
            ax.set_xscale("log", base=2)
        if panel.get("hline") is not None:
            value, label = panel["hline"]
            ax.axhline(value, color=FAIL_COLOUR, linestyle="--", linewidth=1, label=label)
        ax.set_title(panel.get("title", ""), fontsize=10)
        ax.set_xlabel(panel.get("xlabel", ""))
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.grid(True, alpha=0.3)
        if any(s.get("label") for s in panel.get("series", [])) or panel.get("hline") is not None:
            ax.legend(fontsize=8)
    return _png(fig)


def bars(groups: Sequence[str], series: Sequence[Mapping[str, Any]], *, title: str, ylabel: str,
         hline: tuple[float, str] | None = None, integer: bool = False, width: float = 7.5,
         height: float = 3.0) -> bytes:
    """Grouped vertical bars: one group per label in ``groups``, one bar per series
    (``{"label", "values": [...] (None = no bar), "colour" or "colours": [...] optional}``);
    ``integer``: counts, whole-number ticks."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    n = max(1, len(series))
    step = 0.8 / n
    for i, s in enumerate(series):
        xs = [g + (i - (n - 1) / 2) * step for g in range(len(groups))]
        vals = [0.0 if v is None else float(v) for v in s["values"]]
        colours = s.get("colours") or [s.get("colour") or COLOURS[i % len(COLOURS)]] * len(vals)
        ax.bar(xs, vals, width=step * 0.9, color=colours, label=s.get("label"))
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8, rotation=20 if len(groups) > 4 else 0)
    if hline is not None:
        ax.axhline(hline[0], color=FAIL_COLOUR, linestyle="--", linewidth=1, label=hline[1])
    if integer:
        from matplotlib.ticker import MaxNLocator
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if any(s.get("label") for s in series) or hline is not None:
        ax.legend(fontsize=8)
    return _png(fig)
