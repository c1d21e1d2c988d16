"""How every figure looks: one colour per algorithm, line styles, text sizes for a paper
column, the log axis' floor, how a config value prints, and the furniture shared by the
per-task figures (analysis/plot.py) and the paper's (analysis/paper/figures.py): the
threshold line, the legend below the axes, titles wrapped to the figure's width.

Importing it selects matplotlib's Agg backend (figures are files, never windows); `plt`
is pyplot after that choice.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.transforms  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402,F401
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# One look per method in every figure: name, colour, line style, width and marker (the
# marker where a figure draws points). The paper's methods keep the artifact's
# plotting-script values (TPO blue, solid and thickest; GRPO orange; DG red, dashed; ...); a
# token-level variant shares its sequence-level method's look. PG, which the artifact draws
# in PPO's light blue (the paper never shows the two together), and every other method of
# conf/algo have a colour of their own, at least 25 CIELAB units from every other method's.
@dataclass(frozen=True)
class Look:
    label: str
    color: str
    ls: str = "-"
    lw: float = 1.7
    marker: str = "o"


STYLE = {
    "tpo": Look("TPO", "#2C7BB6", "-", 2.6, "o"), "grpo": Look("GRPO", "#F4A259", "-", 1.9, "s"),
    "dg": Look("DG", "#D62728", "--", 1.9, "^"), "ppo": Look("PPO", "#ABD9E9", "--", 1.7, "D"),
    "grpo_no_kl": Look("GRPO (no KL)", "#018571", ":", 1.7, "P"),
    "pg": Look("PG", "#66A61E", "--", 1.7, "v"),
    "group_pg": Look("Group PG", "#BF812D", "--", 1.7, "X"), "ce": Look("CE", "#878787", ":", 1.7, "*"),
    "tpo_no_anchor": Look("TPO (no anchor)", "#8C510A", "-.", 1.7, "<"),
    "grpo_masked": Look("GRPO (zv-masked)", "#7B3294", "--", 1.7, ">"),
    "tpo_token": Look("TPO_token", "#2C7BB6", "-", 2.6, "o"),
    "grpo_token": Look("GRPO_token", "#F4A259", "-", 1.9, "s"),
    # methods of ours beside the paper's: named as their presets are
    "cispo": Look("cispo", "#E7298A", "-", 1.7, "h"), "dapo": Look("dapo", "#CC79A7", "-", 1.7, "p"),
    "dr_grpo": Look("dr_grpo", "#882255", "-", 1.7, "d"), "gpg": Look("gpg", "#EE6677", "-", 1.7, "H"),
    "gspo": Look("gspo", "#00441B", "-", 1.7, "8"), "lpo": Look("lpo", "#FF7F00", "-", 1.7, "h"),
    "lpo_clip": Look("lpo_clip", "#1A9850", "-", 1.7, "p"),
    "lpo_reverse": Look("lpo_reverse", "#CCBB44", "-", 1.7, "d"),
    "maxrl": Look("maxrl", "#8C564B", "-", 1.7, "H"),
    "reinforce_pp_baseline": Look("reinforce_pp_baseline", "#C5B0D5", "-", 1.7, "8"),
    "rloo": Look("rloo", "#33BBEE", "-", 1.7, "h"), "tpo_lennorm": Look("tpo_lennorm", "#2D004B", "-", 1.7, "p"),
}
# The paper's methods, in the order its legends list them.
PAPER_METHODS = ("tpo", "grpo", "dg", "ppo", "grpo_no_kl", "pg", "group_pg", "ce", "tpo_no_anchor",
                 "grpo_masked", "tpo_token", "grpo_token")
COLORS = {algo: look.color for algo, look in STYLE.items()}
# Methods the table does not know (a plug-in's): colours at least 20 CIELAB units from
# every colour of the table.
FALLBACK = ["#004488", "#DFC27D", "#F46D43", "#313695", "#7570B3", "#17BECF", "#A50026", "#C49C94"]
LINESTYLES = ["-", "--", ":", "-."]
# rcParams of the paper's figures: serif STIX type, no top or right spine.
PAPER_RC = {"font.family": "serif", "font.serif": ["STIXGeneral", "DejaVu Serif"],
            "mathtext.fontset": "stix", "axes.spines.top": False, "axes.spines.right": False,
            "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 8.5,
            "ytick.labelsize": 8.5, "legend.fontsize": 8.5, "legend.edgecolor": "#B5B5B5",
            "legend.framealpha": 1.0, "legend.fancybox": False}
DPI = 300  # every saved PNG
MIN_PX = 1500  # and at least this wide: a narrow figure is saved at a higher dpi


def png_dpi(fig, dpi: int = DPI) -> int:
    """dpi, raised where the figure would be under MIN_PX wide (below DPI: a draft, as asked)."""
    return dpi if dpi < DPI else max(dpi, -(-MIN_PX // fig.get_size_inches()[0]))

COLUMN_IN = 3.3  # a paper column: one panel is drawn this wide, so its text prints at size
LEGEND_PT = 7  # the smallest size legible in print at that width
TITLE_PT = 8
SUPTITLE_PT = 10
LOG_FLOOR = 1e-4  # a log axis cannot show the band's lower edge at or below zero


def look(algo: str) -> Look:
    """The method's look: the table's, or for a method it does not know a FALLBACK colour
    (crc32 of its name: the same in every figure and process), solid, with circles."""
    # crc32 rather than hash(): Python's str hash changes between processes.
    return STYLE.get(algo) or Look(algo, FALLBACK[zlib.crc32(algo.encode()) % len(FALLBACK)])


def color_for(algo: str) -> str:
    return look(algo).color


def method_label(algo: str) -> str:
    return look(algo).label


def method_styles(algos) -> dict:
    """algo -> (colour, line style, width) for the methods of one figure: each known
    method its look; a method the table does not know a FALLBACK colour no method of
    this figure has taken (line styles vary once the palette is spent), so colours
    never repeat in a figure while the palette lasts."""
    algos = list(dict.fromkeys(algos))
    out = {a: (STYLE[a].color, STYLE[a].ls, STYLE[a].lw) for a in algos if a in STYLE}
    taken = {c for c, _, _ in out.values()}
    rest = [a for a in algos if a not in out]
    for i, a in enumerate(rest):
        free = [c for c in FALLBACK if c not in taken]
        start = zlib.crc32(a.encode()) % len(FALLBACK)
        pref = [c for c in FALLBACK[start:] + FALLBACK[:start] if c in free]
        if pref:
            color, ls = pref[0], "-"
        else:  # palette spent: colours repeat, line styles tell the lines apart
            color = FALLBACK[i % len(FALLBACK)]
            ls = LINESTYLES[1 + (i // len(FALLBACK)) % (len(LINESTYLES) - 1)]
        taken.add(color)
        out[a] = (color, ls, 1.7)
    return out


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


def fit_text(text, width_px: float, renderer=None) -> None:
    """Break a text artist between comma-separated items or words until it is at most
    width_px wide as drawn (its own line breaks stay); a single word wider than that is
    left as it is."""
    fig = text.get_figure()
    renderer = renderer or fig.canvas.get_renderer()
    source = text.get_text()
    chars = max((len(line) for line in source.split("\n")), default=0)
    for _ in range(20):
        drawn = text.get_window_extent(renderer).width
        if drawn <= width_px or chars <= 1:
            return
        chars = max(1, min(chars - 1, int(chars * width_px / drawn)))
        text.set_text("\n".join(_fill(part, chars) for part in source.split("\n")))


def _fill(line: str, chars: int) -> str:
    """A line broken into lines of at most chars characters: between comma-separated
    items where it lists them ("H 10, V 2, ..."), else between words."""
    import textwrap
    if ", " not in line:
        return textwrap.fill(line, chars, break_long_words=False)
    out = []
    for item in line.split(", "):
        if out and len(out[-1]) + 2 + len(item) + 1 <= chars:  # room for the comma a break adds
            out[-1] += ", " + item
        else:
            out[-1:] = [out[-1] + ",", item] if out else [item]
    return "\n".join(textwrap.fill(o, chars, break_long_words=False) for o in out)


def fit_figure_texts(fig, margin_px: float = 4) -> None:
    """Every title and caption of the figure inside it: the figure's supertitle and
    x label within its width, each panel's title within its panel."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    for t in (fig._suptitle, fig._supxlabel):
        if t is not None and t.get_text():
            fit_text(t, 0.98 * fig.bbox.width - margin_px, renderer)
    for ax in fig.axes:
        if ax.title.get_text():
            fit_text(ax.title, max(ax.bbox.width, 1.0), renderer)
    fig.draw_without_rendering()
