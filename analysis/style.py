"""How every figure looks: one colour per algorithm, line styles, text sizes for a paper
column, the log axis' floor, how a config value prints, and the furniture shared by the
per-task figures (analysis/plot.py) and the paper's (analysis/paper/figures.py): the
threshold line, the legend below the axes, titles wrapped to the figure's width.

Importing it selects matplotlib's Agg backend (figures are files, never windows); `plt`
is pyplot after that choice.
"""
from __future__ import annotations

import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.transforms  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402,F401
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# Fixed colours so an algorithm looks the same in every figure.
COLORS = {
    "tpo": "#1f77b4", "grpo": "#d62728", "dg": "#2ca02c", "pg": "#ff7f0e", "ppo": "#9467bd",
    "tpo_token": "#17becf", "grpo_token": "#e377c2", "tpo_no_anchor": "#aec7e8",
    "group_pg": "#bcbd22", "grpo_no_kl": "#ff9896", "grpo_masked": "#8c564b", "ce": "#7f7f7f",
}
FALLBACK = ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354"]
LINESTYLES = ["-", "--", ":", "-."]

COLUMN_IN = 3.3  # a paper column: one panel is drawn this wide, so its text prints at size
LEGEND_PT = 7  # the smallest size legible in print at that width
TITLE_PT = 8
SUPTITLE_PT = 10
LOG_FLOOR = 1e-4  # a log axis cannot show the band's lower edge at or below zero


def color_for(algo: str) -> str:
    # crc32 rather than hash(): Python's str hash changes between processes.
    return COLORS.get(algo, FALLBACK[zlib.crc32(algo.encode()) % len(FALLBACK)])


def fmt(v) -> str | None:
    """A config value as a legend or title prints it ("0.001", "8", "prompts"); None for a
    missing one."""
    if v is None or (np.ndim(v) == 0 and pd.isna(v)):
        return None
    if isinstance(v, (float, np.floating)):
        return f"{v:g}"
    return str(v)


def wrap(items, width: float = COLUMN_IN, pt: float = TITLE_PT) -> str:
    """Title items joined by commas, broken between items into lines that fit `width`
    inches at `pt` points (DejaVu Sans: about 0.62 em a character)."""
    chars = max(20, int(width * 72 / (0.62 * pt)))
    lines = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= chars:
            lines[-1] += ", " + item
        else:
            lines[-1:] = [lines[-1] + ",", item] if lines else [item]
    return "\n".join(lines)


def threshold_line(ax, thr: float):
    """A dotted, labelled line at the steps-to-threshold level, where the drawn y range
    shows it (drawing it elsewhere would stretch the axis to a level no curve reaches)."""
    lo, hi = ax.get_ylim()
    if not min(lo, hi) <= thr <= max(lo, hi):
        return None
    text = f"{thr * 100:g} %"
    line = ax.axhline(thr, color="k", lw=0.8, ls=":", label=f"{text} threshold")
    # named on the line itself (the legend stays the curves'), at the left end: error
    # curves start high there, so the label rarely sits on one
    ax.text(0.01, thr, text, transform=ax.get_yaxis_transform(), ha="left", va="bottom",
            fontsize=LEGEND_PT)
    ax.set_ylim(lo, hi)
    return line


def _fit_ncol(make, n: int, width_px: float):
    """The legend with as many columns (at most 6) as fit width_px."""
    renderer = None
    for ncol in range(min(n, 6), 0, -1):
        leg = make(ncol)
        if renderer is None:
            renderer = leg.figure.canvas.get_renderer()
        if ncol == 1 or leg.get_window_extent(renderer).width <= width_px:
            return leg, renderer
        leg.remove()


def legend_below(fig, handles, labels, ax=None, grow: bool = True):
    """The legend under the axes (ax: attached to it) or under every panel, never over a
    curve, with as many columns as the figure's width holds (ax: as the axes' width); the
    figure grows by its height so the axes keep theirs (grow=False: the caller grows it)."""
    fig.draw_without_rendering()  # lay out first: the axes' tick labels and x label below them
    if ax is not None:
        below = (ax.bbox.y0 - ax.get_tightbbox().y0) / fig.dpi + 0.04
        anchor = ax.transAxes + matplotlib.transforms.ScaledTranslation(0, -below, fig.dpi_scale_trans)
        make = lambda ncol: ax.legend(handles, labels, ncol=ncol, fontsize=LEGEND_PT,  # noqa: E731
                                      loc="upper center", bbox_to_anchor=(0.5, 0),
                                      bbox_transform=anchor, frameon=False)
    else:
        make = lambda ncol: fig.legend(handles, labels, ncol=ncol, fontsize=LEGEND_PT,  # noqa: E731
                                       loc="outside lower center", frameon=False)
    width = max(ax.get_tightbbox().width, ax.bbox.width) if ax is not None else fig.bbox.width
    leg, renderer = _fit_ncol(make, len(labels), 0.98 * width)
    if grow:
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + leg.get_window_extent(renderer).height / fig.dpi)
    return leg
