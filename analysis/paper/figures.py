"""The paper's figures (docs/figures.md) as a declarative table: figure -> panels.

A panel picks rows of its experiment (analysis/paper/experiments.py) with a filter and draws
one of three kinds:
- curve: y against step, seed mean with a +-1 SE band, one line per (algorithm, config
  hash) as in analysis/plot.py (hashes are never pooled); several y columns share a colour and
  differ by line style (e.g. target mass on successes vs failures);
- final: the final value (seed mean +- SE) against a swept setting x, one line per
  algorithm (and per `series` key);
- steps: the paper's steps-to-threshold (first step the seed-mean curve is below it)
  against x; a setting whose mean never gets there has no point and is counted in the label.
Colours, line styles and sizes come from analysis/style.py, labels and titles from
analysis/labels.py, as for the per-task figures: an algorithm looks the same in every figure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import stats
from ..collect import GROUP, PROGRESS, completed
from ...cli import spelled
from ..configs import pick_config
from ..note import note_inside
from ..labels import compact_labels, label_text, se_text, short_key, title_items
from . import experiments
from .experiments import ALIASES, EXPERIMENTS, TARGETS
from ..style import (DPI, COLUMN_IN, png_dpi, LEGEND_PT, LINESTYLES, LOG_FLOOR, SUPTITLE_PT, TITLE_PT,
                            color_for, fit_figure_texts, fmt, legend_below, look, plt, threshold_line, wrap)
from ...contract import io


class NoData(Exception):
    """A figure with nothing to draw; the message says what to run."""


@dataclass(frozen=True)
class Panel:
    title: str
    where: dict = field(default_factory=dict)
    y: tuple = ("error",)
    kind: str = "curve"  # curve | final | steps
    x: str = "step"  # the swept setting for final / steps panels
    scale: str = "log"
    xscale: str = "linear"
    smooth: int = 0  # trailing moving average over this many steps (curve panels)
    xlabel: str = "episode"
    ylabel: str = "error"
    hline: float | None = None  # a threshold line (and the threshold of steps panels)
    series: tuple = ()  # keys that split one algorithm into several lines (final / steps)


@dataclass(frozen=True)
class Figure:
    name: str
    panels: tuple
    ncols: int = 4
    experiment: str | None = None  # defaults to the figure's name

    @property
    def title(self) -> str:
        return EXPERIMENTS[self.experiment or self.name].title


BAG, SEQ = "bag_of_tokens", "sequential"
EXACT = "exact-match error"
VARIANT = "variant"  # derived column: reward and target in the paper's short words
CURVES_1PCT = dict(hline=0.01)
# What an MNIST test-error panel is measured on: the bundled test file (the paper scores all 10,000)
MNIST_TEST = "test file (first 3,000 of 10,000 images)"


def _sweep(name, x, xlabel, **kw):
    return Figure(name, (Panel(f"final error vs {xlabel}", kind="final", x=x, xscale="log",
                               xlabel=xlabel, ylabel="final error", **kw),))


FIGURES = {f.name: f for f in [
    Figure("hero", (
        Panel(f"MNIST bandit, {MNIST_TEST}", {"task": "mnist"}, xlabel="update", ylabel="test error"),
        Panel("terminal reward, H = 10 (40-ep. moving avg.)", {"task": "seq"},
              scale="linear", smooth=40, ylabel=EXACT),
    ), ncols=2),
    Figure("tabular_single", (
        Panel("error", xlabel="step"),
        Panel("misalignment", y=("misalignment",), xlabel="step", ylabel="1 - cos(g, oracle)"),
    ), ncols=2),
    Figure("tabular_multi", (
        Panel("error", xlabel="step"),
        Panel("misalignment to CE", y=("misalignment",), xlabel="step", ylabel="1 - cos(g, CE)"),
    ), ncols=2),
    # the paper's MNIST numbers include steps to 5 % error
    Figure("mnist", (Panel(f"MNIST bandit, {MNIST_TEST}", xlabel="update", ylabel="test error",
                           hline=0.05),), ncols=1),
    Figure("mnist_holdout", (
        Panel("validation split (10k held-out training images)", xlabel="update",
              ylabel="validation error", hline=0.05),
        Panel(f"{MNIST_TEST}, same networks", y=("test_error",),
              xlabel="update", ylabel="test error", hline=0.05),
    ), ncols=2),
    Figure("mnist_stale", tuple(
        Panel(f"D = {d}, {MNIST_TEST}", {"D": d}, xlabel="update", ylabel="test error")
        for d in (0, 10, 100, 1000))),
    Figure("vocab_sweep", tuple(
        Panel(f"V = {v}", {"V": v}, scale="linear", **CURVES_1PCT) for v in (2, 4, 8, 16))),
    Figure("task_variants", tuple(
        Panel(f"{'bag' if r == BAG else 'seq'} {t.replace('reverse_', 'rev-')}",
              {"reward": r, "target": t}, **CURVES_1PCT)
        for r in (BAG, SEQ) for t in TARGETS)),
    Figure("terminal_h_sweep", tuple(
        Panel(f"{m[:-1]}-matched, H = {h}", {"match": m, "H": h}, scale="linear", ylabel=EXACT)
        for m in ("prompts", "interactions") for h in (7, 8, 9, 10))),
    Figure("ablations", tuple(
        Panel(f"H = {h}", {"H": h}, scale="linear", ylabel=EXACT) for h in (7, 8, 10)), ncols=3),
    _sweep("k_sweep", "K", "K"),
    _sweep("epoch_sweep", "epochs", "epochs"),
    Figure("zero_variance_masking", (Panel("K = 32, 4 epochs", {"K": 32, "epochs": 4},
                                           ylabel=EXACT),), ncols=1),
    Figure("eta_sweep", (
        Panel("steps to 1 % error", kind="steps", x="eta", xscale="log", scale="linear",
              xlabel="eta", ylabel="steps to 1 %", hline=0.01),
        Panel("final error", kind="final", x="eta", xscale="log", xlabel="eta",
              ylabel="final error"),
    ), ncols=2),
    Figure("dg_epochs", (
        Panel("terminal reward", {"reward": "terminal"}, scale="linear", ylabel=EXACT),
        Panel("dense variants", {"reward": [BAG, SEQ]}, kind="final", x=VARIANT,
              series=("epochs",), xlabel="variant", ylabel="final error"),
    ), ncols=2),
    Figure("diagnostics", tuple(
        Panel(title, {"K": 32, "epochs": 4}, y=y, ylabel=label) for title, y, label in [
            ("error", ("error",), EXACT),
            ("gradient norm (first epoch)", ("grad_norm",), "||g||"),
            ("all-fail fraction", ("all_fail_frac",), "fraction of groups"),
            ("target mass (TPO): success -, fail --", ("q_success", "q_fail"), "mean q"),
            ("|A| (GRPO): success -, fail --", ("absA_success", "absA_fail"), "mean |A|"),
        ]), ncols=3),
    # The mechanism figures' diagnostics where they exist at H = 8: the terminal H sweep's runs.
    Figure("mechanism_h8", tuple(
        Panel(title, {"H": 8, "match": "prompts"}, y=y, ylabel=label, scale="linear")
        for title, y, label in [
            ("error (K 8, B 100)", ("error",), EXACT),
            ("gradient norm (first epoch)", ("grad_norm",), "||g||"),
            ("all-fail fraction", ("all_fail_frac",), "fraction of groups"),
            ("success fraction", ("success_prompt_frac",), "fraction of prompts"),
            ("target mass (TPO): success -, fail --", ("q_success", "q_fail"), "mean q"),
            ("|A| (GRPO): success -, fail --", ("absA_success", "absA_fail"), "mean |A|"),
        ]), ncols=3, experiment="terminal_h_sweep"),
]}


def with_variant(df: pd.DataFrame) -> pd.DataFrame:
    """Add the derived `variant` column ("bag rev-copy", ...) where reward/target exist."""
    if not {"task.reward", "task.target"} <= set(df.columns):
        return df
    reward = df["task.reward"].map({BAG: "bag", SEQ: "seq"}).fillna(df["task.reward"])
    target = df["task.target"].astype(str).str.replace("reverse_", "rev-").str.replace("_", "-")
    return df.assign(**{VARIANT: reward.astype(str) + " " + target})


def progress(rows: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A line's rows and what its panel says of them. Where some of its seeds are runs
    under way (collect.in_progress), the rows up to the last step every seed reached (the
    band is over the same seeds throughout) and "episodes 0–N of T, running" (or
    "interrupted"); else the rows and ""."""
    if "partial" not in rows.columns or not rows["partial"].eq(True).any():
        return rows, ""
    last = int(rows.groupby("seed")["step"].max().min())
    running = PROGRESS in rows.columns and rows[PROGRESS].eq("running").any()
    total = rows["task.episodes"].dropna().unique() if "task.episodes" in rows.columns else []
    of = f" of {int(total[0]):,}" if len(total) == 1 else ""
    return (rows[rows["step"] <= last],
            f"episodes 0–{last:,}{of}, {'running' if running else 'interrupted'}")


def final_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows a final value is read from: the completed runs' (a run under way has no
    final value); and, where some were left out, what its panel says of them (progress)."""
    done = completed(rows)
    return done, "" if len(done) == len(rows) else progress(rows)[1]


@dataclass
class Entry:
    """One drawn line, labelled once the whole figure is drawn: its seed count goes into
    the label only where the lines' counts differ."""
    handle: object
    algo: str
    parts: list
    ns: set
    tail: str = ""
    zeros: list = field(default_factory=list)  # final / steps: the x values whose value is 0


def _style(styles: dict, algo: str, label: str) -> str:
    """A line's style, per (algorithm, label) across the figure (the shared legend's style
    is every panel's): the method's own for its first line, the next ones after it."""
    mine = styles.setdefault(algo, {})
    own = LINESTYLES.index(look(algo).ls) if look(algo).ls in LINESTYLES else 0
    return LINESTYLES[(own + mine.setdefault(label, len(mine))) % len(LINESTYLES)]


def _curve(ax, p: Panel, d: pd.DataFrame, per_line=(), styles=None, notes=None) -> list[Entry]:
    """A line per (algorithm, config hash); notes, given a list, gets what the panel says of
    a line under way (progress)."""
    # Which preset ran a line is not a config key: keep it out of the legend.
    parts = compact_labels(d.drop(columns=["experiment"], errors="ignore"), per_line)
    styles = {} if styles is None else styles
    notes = [] if notes is None else notes
    drawn = []
    for key, g in d.groupby(GROUP, sort=True):
        algo, line_parts = parts[key]
        g, under_way = progress(g)
        if under_way:
            notes.append(f"{label_text(algo, line_parts)}: {under_way}")
        for j, y in enumerate(p.y):
            if y not in g.columns:
                continue
            wide = stats.moving_average(stats.seed_curves(g, y), p.smooth)
            if wide.empty:
                continue
            mean, se = stats.mean_se(wide)
            lo, hi = mean - se, mean + se
            if p.scale == "log":  # a log axis cannot show a band edge at or below zero
                floor = min(LOG_FLOOR, mean[mean > 0].min()) if (mean > 0).any() else LOG_FLOOR
                lo, hi = lo.clip(lower=floor), hi.clip(lower=floor)
            tail = f" {y}" if len(p.y) > 1 else ""
            style = (LINESTYLES[j % len(LINESTYLES)] if len(p.y) > 1
                     else _style(styles, algo, label_text(algo, line_parts)))
            line, = ax.plot(mean.index, mean.values, color=color_for(algo), ls=style, lw=1.3)
            ax.fill_between(mean.index, lo.values, hi.values, color=color_for(algo), alpha=0.2, lw=0)
            drawn.append(Entry(line, algo, line_parts, {wide.shape[1]}, tail))
    return drawn


def _points(ax, p: Panel, d: pd.DataFrame, per_line=(), styles=None, notes=None) -> list[Entry]:
    """final / steps panels: one marker line per algorithm (and series) over x, from the
    completed runs; notes, given a list, gets the settings whose runs are under way."""
    if p.x == VARIANT:
        d = with_variant(d)
    xcol = ALIASES.get(p.x, p.x)
    series = [ALIASES.get(s, s) for s in p.series]
    categorical = not pd.api.types.is_numeric_dtype(d[xcol])
    ticks = sorted(d[xcol].dropna().unique())
    styles = {} if styles is None else styles
    notes = [] if notes is None else notes
    drawn = []
    for key, g in d.groupby(["algo.name", *series], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        xs, ys, es, ns, never, zeros = [], [], [], set(), 0, []
        parts = [f"{short_key(s)}={fmt(v)}" for s, v in zip(series, key[1:])]
        for xv, gx in g.groupby(xcol, sort=True):
            gx, under_way = final_rows(gx)
            if under_way:
                notes.append(f"{label_text(key[0], parts)} at {short_key(xcol)} = {fmt(xv)}: {under_way}")
            wide = stats.seed_curves(pick_config(gx), p.y[0]) if not gx.empty else pd.DataFrame()
            if wide.empty:
                continue
            if p.kind == "steps":
                hit = stats.mean_steps_to_threshold(wide, p.hline or stats.THRESHOLD)
                if hit is None:
                    never += 1
                    continue
                value, err = hit, 0.0
            else:
                last = wide.iloc[-1]
                value, err = last.mean(), stats.standard_error(last)
            xs.append(ticks.index(xv) if categorical else xv)
            ys.append(value)
            if value <= 0:
                zeros.append(xv)
            es.append(err)
            ns.add(wide.shape[1])
        if not xs and not never:
            continue
        for col in per_line:  # what the title leaves to the lines, where a line has one value
            values = g[col].dropna().unique() if col in g.columns and col not in series else []
            if len(values) == 1:
                parts.append(f"{short_key(col)}={fmt(values[0])}")
        parts += [f"{never} never"] if never else []
        line = ax.errorbar(xs, ys, yerr=es, color=color_for(key[0]), marker=look(key[0]).marker, ms=4, capsize=2,
                           ls=_style(styles, key[0], label_text(key[0], parts)))
        drawn.append(Entry(line, key[0], parts, ns, zeros=zeros))
    if categorical:
        ax.set_xticks(range(len(ticks)), ticks, rotation=45, ha="right", fontsize=LEGEND_PT)
    return drawn


def show_zeros(ax, p: Panel, drawn: list[Entry]) -> None:
    """A log-scaled final / steps panel with values at 0, which a log axis cannot show:
    a symlog axis, linear from 0 up to a floor a decade at or below the smallest value
    above 0 (at most LOG_FLOOR), logarithmic above it; a note inside the panel names the
    floor and the points at 0."""
    ys = [y for e in drawn for y in e.handle.lines[0].get_ydata()]
    above = [y for y in ys if y > 0]
    floor = min(LOG_FLOOR, 10 ** math.floor(math.log10(min(above)))) if above else LOG_FLOOR
    ax.set_yscale("symlog", linthresh=floor)
    # room below 0 for the markers at 0, above the highest point for the note
    ax.set_ylim(bottom=-0.25 * floor, top=max([*ys, 10 * floor]) * 5)
    x = short_key(ALIASES.get(p.x, p.x))
    at = "; ".join(f"{e.algo}{' ' + ' '.join(e.parts) if e.parts else ''} at "
                   + (f"every {x}" if len(e.zeros) == len(e.handle.lines[0].get_ydata()) > 1
                      else f"{x} = {', '.join(fmt(v) for v in e.zeros)}")
                   for e in drawn if e.zeros)
    note_inside(ax, f"{p.ylabel} 0: {at}; axis linear below {fmt(floor)}", "zeros")


PANEL_H = 2.4  # inches of one panel, title and axes labels included


def _skip(p: Panel) -> set:
    """Columns a panel's own axes or title show: not repeated in the titles above it."""
    shown = {ALIASES.get(k, k) for k in p.where}
    if p.kind != "curve":
        shown |= {ALIASES.get(p.x, p.x), *(ALIASES.get(s, s) for s in p.series)}
        if p.x == VARIANT:
            shown |= {"task.reward", "task.target"}
    return shown


def render(name: str, df: pd.DataFrame, title: str | None = None):
    """The matplotlib figure of one experiment, every run of it (the paper's form is
    analysis/paper/paper_figures.py); NoData if nothing in df belongs to it. title:
    instead of the experiment's.
    Titles name the task's parameters from the data (figure title: those every panel
    shares; panel titles: the rest), the bands' seed count, and a shared legend below."""
    spec = FIGURES[name]
    rows = experiments.select(df, spec.experiment or name)
    panels = [(p, rows[experiments.matches(rows, p.where)]) for p in spec.panels]
    if all(d.empty for _, d in panels):
        raise NoData(f"no results for figure {name!r}: run "
                     f"{experiments.how_to_run(spec.experiment or name)}, then `{spelled('collect')}`")
    ncols = min(spec.ncols, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(COLUMN_IN * ncols, PANEL_H * nrows + 0.5),
                             squeeze=False, layout="constrained")
    # a final / steps panel's x axis (and series) shows what the title would say
    items = [title_items(d, skip=_skip(p) if p.kind != "curve" else ())
             if not d.empty else None for p, d in panels]
    # A key that differs between the lines of one panel is named on every line of every
    # panel: the same run then has one label (and style) in the shared legend.
    per_line = list(dict.fromkeys(c for i in items if i for c, text in i if text.endswith("per line")))
    known = [set(i) for i in items if i is not None]
    common = [it for it in next(i for i in items if i is not None)
              if all(it in k for k in known) and it[0] not in per_line]
    common += [(c, f"{short_key(c)} per line") for c in per_line]
    entries, styles = [], {}
    for ax, (p, d), own in zip(axes.flat, panels, items):
        notes = []
        drawn = [] if d.empty else (_curve if p.kind == "curve" else _points)(ax, p, d, per_line, styles, notes)
        entries += drawn
        if not drawn:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        elif p.scale == "log" and any(e.zeros for e in drawn):
            show_zeros(ax, p, drawn)
        else:
            ax.set_yscale(p.scale)
        if notes:
            note_inside(ax, "\n".join(notes), "progress")
        if drawn:
            if p.xscale == "log":
                ax.set_xscale("log", base=2)
        if p.hline is not None and p.kind == "curve" and drawn:
            threshold_line(ax, p.hline)
        skip = _skip(p)
        named = p.title.lower().replace(" = ", " ")  # "H = 10" in a title names "H 10"
        extra = [text for col, text in own or () if (col, text) not in common and col not in skip
                 and col not in per_line and text.lower() not in named]
        ax.set(title="\n".join([wrap(p.title.split(", ")), *([wrap(extra)] if extra else [])]),
               xlabel=p.xlabel, ylabel=p.ylabel)
        ax.title.set_fontsize(TITLE_PT)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    ns = set().union(*(e.ns for e in entries)) if entries else set()
    caption = [text for _, text in common] + ([se_text(ns)] if ns else [])
    fig.suptitle("\n".join([title or spec.title, wrap(caption, COLUMN_IN * ncols, SUPTITLE_PT)]),
                 fontsize=SUPTITLE_PT)
    fit_figure_texts(fig)
    handles, labels = [], []
    for e in entries:
        n = None if len(ns) == 1 else "–".join(map(str, sorted({min(e.ns), max(e.ns)})))
        label = label_text(e.algo, e.parts, n, e.tail)
        e.handle.set_label(label)
        if label not in labels:  # an algorithm in every panel is named once
            handles.append(e.handle)
            labels.append(label)
    if handles:
        legend_below(fig, handles, labels)
    return fig


def _save(fig, name: str, out_dir, dpi: int) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        paths.append(out_dir / f"{name}.{ext}")
        # No creation date in the PDF: a regenerated report changes only where data did.
        io.save_figure(fig, paths[-1], dpi=png_dpi(fig, dpi), metadata={"CreationDate": None} if ext == "pdf" else None)
    compact_png(paths[0])
    plt.close(fig)
    return paths


def compact_png(path: Path) -> None:
    """Rewrite a saved PNG with a 256-colour palette (lines, bands and text need no more):
    a third of the bytes in the repository, the same pixels to the eye and the same dpi."""
    from PIL import Image
    with Image.open(path) as im:
        dpi = im.info.get("dpi")
        small = im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    with io.atomic_path(path) as tmp:
        small.save(tmp, format="PNG", optimize=True, **({"dpi": dpi} if dpi else {}))


def draw(name: str, df: pd.DataFrame, out_dir, dpi: int = DPI) -> list[Path]:
    """Draw one figure as PNG and PDF into out_dir; returns the paths (PNG first)."""
    return _save(render(name, df), name, out_dir, dpi)


@dataclass(frozen=True)
class SeedGroup:
    """One method's per-seed final errors (%), ours and the paper's (analysis/paper/paper_seeds.csv)."""
    algo: str
    ours: tuple
    paper: tuple


SEEDS_FIGURE = "terminal_seeds"


def render_seed_distributions(groups, title: str):
    """Per-seed final error as empirical CDFs, ours beside the paper's, one panel per method.
    A terminal-reward seed ends near 0 % or stalls far above, so a seed mean hides what the
    CDF shows: how many seeds solved the task (the dotted line is stats.SOLVED_PCT)."""
    if not groups:
        raise NoData("no method with the paper's per-seed values has runs")
    fig, axes = plt.subplots(1, len(groups), figsize=(COLUMN_IN * len(groups), 3.0),
                             squeeze=False, layout="constrained")
    for ax, g in zip(axes.flat, groups):
        for j, (who, values) in enumerate((("ours", g.ours), ("paper", g.paper))):
            xs = sorted(values)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            label = (f"{g.algo} {who}: {stats.n_below(xs)}/{len(xs)} seeds "
                     f"< {stats.SOLVED_PCT:g} %")
            # a step from 0 before the first seed and on to the axis' end after the last
            ax.step([0.0, *xs, 100.0], [0.0, *ys, 1.0], where="post", lw=1.3,
                    ls=LINESTYLES[j], color=color_for(g.algo), label=label)
            # unclipped: seeds at exactly 0 % or 100 % sit on the axis' ends
            ax.plot(xs, ys, ls="none", marker="ox"[j], ms=4, color=color_for(g.algo), clip_on=False)
        ax.axvline(stats.SOLVED_PCT, color="k", lw=0.6, ls=":")
        # linear below 1 %, where solved seeds differ, logarithmic up to 100 %
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set(xlim=(-0.1, 100), ylim=(0, 1.02), xlabel="final exact-match error (%)",
               ylabel="fraction of seeds at or below",
               title=f"{g.algo}: rank-sum p = {stats.rank_sum_test(g.ours, g.paper):.2g}")
        ax.title.set_fontsize(TITLE_PT)
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title, fontsize=SUPTITLE_PT)
    fit_figure_texts(fig)
    # each panel's own legend (ours and the paper's differ per method), under it
    grow = max(legend_below(fig, *ax.get_legend_handles_labels(), ax=ax, grow=False)
               .get_window_extent().height for ax in axes.flat)
    w, h = fig.get_size_inches()
    fig.set_size_inches(w, h + grow / fig.dpi)
    return fig


def draw_seed_distributions(groups, title: str, out_dir, dpi: int = DPI) -> list[Path]:
    return _save(render_seed_distributions(groups, title), SEEDS_FIGURE, out_dir, dpi)
