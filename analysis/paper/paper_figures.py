"""The paper's 17 figures in the paper's form: its panels, methods, colours and line
styles, axis scales and ranges, smoothing, axis labels and panel letters, +-1 SE bands
over seeds and a boxed legend of method names (analysis/style.py's STYLE).

A preset (PAPER) lists per panel the lines the paper draws: a method and, where the paper
splits one (K, epochs, eta), that setting. Each line is one configuration of the
experiment's rows (analysis/configs.pick_config: most seeds, then longest log). Whatever
else the experiment ran (extra methods, other configurations) goes to the companion
figure `<name>_companion`, drawn by analysis/paper/figures.py's generic layout; a panel
with no runs, or a metric no run records, is drawn empty with a one-line reason.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import stats
from ..configs import algo_defaults, pick_config
from . import experiments, figures
from .experiments import ALIASES
from ..style import (DPI, PAPER_METHODS, PAPER_RC, fit_figure_texts, fmt, look,
                                      method_label, plt, png_dpi)
from ...contract import io

EXACT, SEQERR = "Exact-match error", "Sequence error"


@dataclass(frozen=True)
class Line:
    algo: str
    where: dict = field(default_factory=dict)  # the setting that splits a method (K = 4)
    label: str = ""  # legend text; default the method's name
    shade: float = 0.0  # 0: the method's colour; > 0 lighter, < 0 darker tones of it
    color: str = ""  # a colour of its own (a swept setting the paper draws in distinct hues)


@dataclass(frozen=True)
class Panel:
    title: str
    lines: tuple
    where: dict = field(default_factory=dict)
    y: str = "error"
    y2: str = ""  # a second metric of the same lines, dashed (failed vs successful candidates)
    kind: str = "curve"  # curve | final (vs x) | bars (one per line, or per line and x)
    x: str = ""  # final / bars: the setting on the x axis
    xs: tuple = ()
    scale: str = "linear"
    ylim: tuple | None = None
    xlim: tuple | None = None
    smooth: int = 0  # trailing moving average over this many steps
    xlabel: str = "Episode"
    ylabel: str = EXACT
    percent: bool = False  # bars: y in percent
    missing: str = ""  # the metric no run records: the panel is drawn empty, saying so
    legend: bool = False  # a legend of its own (the paper's mechanism figures)
    seeds: int = 0  # the paper's seeds per line here, where they differ from its figure's
    model: str = ""  # an LLM panel's model: the runs whose task.model_path is its folder


@dataclass(frozen=True)
class PaperFigure:
    name: str
    number: int
    experiment: str
    panels: tuple
    ncols: int
    paper: str  # the paper's figure in our words: what each panel shows, who should be where
    size: tuple = (3.3, 2.6)  # inches per panel
    legend: str = "top"  # top | bottom | panels
    companion: str | None = None  # figures.FIGURES layout for the runs not drawn here
    label: str = ""  # appended to the caption line, e.g. that the panels are other runs
    row_labels: tuple = ()  # grids: the first column's y label names its row
    row_names: tuple = ()  # grids: each row's name in the caption (default its label)
    seeds: int = 0  # the paper's seeds per line (0: it does not say)
    mosaic: str = ""  # a layout of its own: panel letters per row, e.g. "aa;bc" ((a) above (b, c))


def _lines(*algos, **where) -> tuple:
    return tuple(Line(a, dict(where)) for a in algos)


# Distinct hues (colour-blind-safe, Paul Tol's "bright" and "vibrant") for a swept setting
# the paper draws one colour per value; the method's own colour stays on its default value.
HUES = ("#EE6677", "#228833", "#CCBB44", "#AA3377", "#EE7733", "#66CCEE")


def _hues(algo, key, values, default, fmt="{}") -> tuple:
    """A line per value of a swept setting, each in its own colour; the method's colour
    on its default value."""
    others = iter(HUES)
    return tuple(Line(algo, {key: v}, fmt.format(v), color="" if v == default else next(others))
                 for v in values)


def _shades(algo, key, values, fmt="{}") -> tuple:
    """A line per value of a swept setting, light to dark tones of the method's colour."""
    tones = np.linspace(0.6, -0.55, len(values))
    return tuple(Line(algo, {key: v}, f"{fmt.format(v)}", shade=float(t)) for t, v in zip(tones, values))


TERM = ("tpo", "grpo", "grpo_no_kl", "dg", "ppo")
DENSE = ("tpo_token", "grpo_token", "dg", "ppo")
MECH = dict(H=8, K=32, B=256)
# Figure 10(b)'s weight proxy: target mass q for TPO, |A| for GRPO (successes, failures).
PROXY = {"grpo": ("absA_success", "absA_fail"), "grpo_no_kl": ("absA_success", "absA_fail")}
TARGET_NAMES = {"copy": "Copy", "flip": "Flip", "reverse_copy": "Reverse copy", "reverse_flip": "Reverse flip"}


# TPO at 4 and at 1 epoch per batch, as the mechanism figures (10, 11, 14) draw it.
EPOCHS_14 = (Line("tpo", {"epochs": 4}, "TPO (4 ep)"), Line("tpo", {"epochs": 1}, "TPO (1 ep)", shade=0.5))


def _mech(name, number, experiment, panels, paper, ncols=2, companion=None):
    """Figures 10, 11 and 14: the mechanism study's diagnostics, 10 seeds in the paper."""
    return PaperFigure(name, number, experiment, panels, ncols, paper, size=(3.4, 2.6),
                       legend="panels", companion=companion, seeds=10)


PAPER = {f.name: f for f in [
    PaperFigure("hero", 1, "hero", (
        Panel(f"(a) MNIST, {figures.MNIST_TEST}",
              _lines("tpo", "grpo", "dg"), {"task": "mnist"},
              ylim=(0.025, 0.15), xlabel="Step", ylabel="Classification error"),
        Panel("(b) Token reversal (sparse reward)", _lines("tpo", "grpo", "dg"),
              {"task": "seq", "H": 10, "match": "prompts"}, ylim=(0.0, 1.05), smooth=40),
    ), 2, "(a) MNIST bandit, dense reward: TPO slightly below DG, GRPO far above both "
          "(0.14 -> 0.06), on a linear 0.03-0.14 axis. (b) Terminal reward, H = 10, "
          "prompt-matched, 40-episode moving average: DG flat at 1.0, GRPO ends near 0.5, "
          "TPO near 0.1. 20 seeds.", legend="bottom", companion="hero", seeds=20,
          label="(b) is a 40-episode trailing moving average: a line ends at the mean of its "
                "last 40 episodes, not at the last-episode final error the tables judge"),
    PaperFigure("tabular_single", 2, "tabular_single", (
        Panel("(a) Policy error", _lines("tpo", "grpo", "dg", "pg"), scale="log",
              ylim=(1e-4, 1.2), xlabel="Step", ylabel=r"Error $\varepsilon = 1-\pi(y^*)$"),
        Panel("(b) Gradient misalignment", _lines("tpo", "grpo", "dg", "pg"), y="misalignment",
              scale="log", ylim=(1e-4, 1.2), xlabel="Step", ylabel=r"$1-\cos(g, g^*_{PG})$"),
    ), 2, "(a) Single-context bandit (K 100, B 100): TPO and DG fall together to 1e-4 by "
          "step ~140, GRPO flattens near 3e-3, PG lags then falls. (b) TPO's misalignment to "
          "the oracle gradient drops below 1e-4 by step ~30; GRPO's rises towards 1.",
        companion="tabular_single", seeds=100),
    PaperFigure("tabular_multi", 3, "tabular_multi", (
        Panel("(a) Average error", _lines("tpo", "grpo", "dg", "pg", "ce"), scale="log",
              ylim=(5e-4, 1.2), xlabel="Step", ylabel=r"Average error $1-\bar p$"),
        Panel("(b) Misalignment to CE oracle", _lines("tpo", "grpo", "dg", "pg"), y="misalignment",
              scale="log", ylim=(1e-4, 0.6), xlabel="Step", ylabel=r"$1-\cos(g, g^*_{CE})$"),
    ), 2, "(a) Multi-context bandit (N 100, K 10, exact gradients): all converge, CE "
          "fastest, TPO next, then GRPO, DG, PG. (b) TPO's misalignment to CE sits near "
          "0.05 and drops to zero; GRPO, DG and PG stay near 0.1-0.5.", companion="tabular_multi",
        seeds=100),
    PaperFigure("mnist", 4, "mnist", (
        Panel(f"(a) Learning curves, {figures.MNIST_TEST}", _lines("tpo", "dg", "group_pg", "grpo", "pg"), scale="log",
              ylim=(0.025, 0.15), xlabel="Step", ylabel="Classification error"),
        Panel("(b) Extra gain on concentrated mistakes", _lines("tpo", "dg"), kind="bars",
              xlabel="Wrong-class concentration", ylabel=r"Excess gain in $p_y$",
              missing="not recorded: no run logs per-example true-class gains at step 2,000"),
    ), 2, "(a) MNIST, log axis: TPO lowest (~0.029 at 10k), DG just above, Group PG, GRPO "
          "and PG together near 0.06-0.07. (b) At step 2,000, TPO's extra gain in the true "
          "class over a one-vs-rest baseline grows with wrong-class concentration "
          "(to ~0.07); DG's stays at or below zero.", companion="mnist", seeds=20),
    PaperFigure("vocab_sweep", 5, "vocab_sweep", tuple(
        Panel(f"$V = {v}$", _lines(*DENSE), {"V": v}, ylim=(0.0, 0.52), smooth=10,
              ylabel=SEQERR) for v in (2, 4, 8, 16)), 4,
        "Bag-of-tokens reward, K 8 token candidates, V 2-16: TPO_token drops to zero "
        "first in every panel, then GRPO_token, PPO, and DG last; the gap widens with V.",
        size=(2.6, 2.2), companion="vocab_sweep", seeds=20),
    PaperFigure("task_variants", 6, "task_variants", tuple(
        Panel(TARGET_NAMES[t] if (m, r) == ("Prompt", "bag") else "", _lines(*DENSE, "grpo_no_kl"),
              {"match": f"{m.lower()}s", "reward": rk, "target": t}, ylim=(0.0, 0.95 if rk != "bag_of_tokens" else 0.52),
              smooth=10, ylabel=SEQERR)
        for m in ("Prompt", "Interaction") for r, rk in (("bag", "bag_of_tokens"), ("seq", "sequential"))
        for t in TARGET_NAMES), 4,
        "Rows: prompt-matched bag-of-tokens, prompt-matched sequential, then both "
        "interaction-matched; columns: copy, flip, reverse copy, reverse flip. TPO_token "
        "reaches ~0 first everywhere; under sequential reward GRPO_token and PPO stall. "
        "(Its legend also lists a green dotted GRPO (no KL), not run on dense tasks here.)",
        size=(2.6, 2.0), companion="task_variants", seeds=10,
        row_labels=("Prompt-matched\nBag of tokens", "Prompt-matched\nSequential",
                    "Interaction-matched\nBag of tokens", "Interaction-matched\nSequential"),
        row_names=("prompt bag", "prompt seq", "interaction bag", "interaction seq")),
    PaperFigure("terminal_h_sweep", 7, "terminal_h_sweep", tuple(
        Panel(f"$H = {h}$" if m == "Prompt" else "", _lines(*TERM), {"match": f"{m.lower()}s", "H": h},
              ylim=(0.0, 1.05), smooth=40)
        for m in ("Prompt", "Interaction") for h in (7, 8, 9, 10)), 4,
        "Terminal reward, top row prompt-matched, bottom interaction-matched, H 7-10: TPO "
        "lowest in every panel (~0.05-0.2); GRPO next, degrading with H; DG, PPO and GRPO "
        "(no KL) near 1.0 from H 9.", size=(2.6, 2.0), companion="terminal_h_sweep", seeds=20,
        row_labels=("Prompt\nmatched", "Interaction\nmatched"), row_names=("prompt", "interaction")),
    PaperFigure("ablations", 8, "ablations", tuple(
        Panel(f"$H = {h}$", _lines("tpo", "grpo", "grpo_no_kl", "tpo_no_anchor", "group_pg"),
              {"H": h}, ylim=(0.0, 1.05), smooth=40) for h in (7, 8, 10)), 3,
        "Terminal reward, prompt-matched, H 7, 8, 10: full TPO lowest; GRPO next; GRPO (no "
        "KL) rises again after ~500 episodes; TPO (no anchor) plateaus ~0.9; Group PG stays "
        "at 1.0. At H = 10 every ablation is at 1.0.", size=(3.0, 2.3), companion="ablations",
        seeds=20),
    PaperFigure("llm", 9, "llm", tuple(
        Panel(f"{title} - {model.removeprefix('DeepSeek-')}", _lines("tpo", "grpo"), {"task.dataset": ds},
              y="pass_at_1" if ds == "gsm8k" else "reward_mean", xlabel="Step", ylabel="Accuracy",
              ylim=(0, 1), model=model)
        for model in ("Qwen3-1.7B", "DeepSeek-R1-Distill-Qwen-1.5B")
        for title, ds in (("GSM8K", "gsm8k"), ("Graph color", "graph_color"),
                          ("Knights & Knaves", "knights_knaves"))), 3, "Qwen3-1.7B (top) and R1-Distill-Qwen-1.5B (bottom), K 16: GSM8K held-out "
          "accuracy, TPO reaches 50 % ~10 steps before GRPO, both end ~0.85; graph "
          "colouring train score, TPO ~0.95, GRPO falls to ~0.1 on Qwen3; Knights & Knaves "
          "level. The paper's panels each say whether we ran them; after them, a panel per "
          "dataset of ours (\"ours\" in its title).", companion=None,
        label="A panel titled \"ours\" is our LLM run (reproduction/runs/llm), not the paper's "
              "task or models"),
    _mech("gradient_norms", 10, "diagnostics", (
        Panel("(a)", (*EPOCHS_14, *_lines("grpo", "ppo", "dg")), MECH, y="grad_norm", smooth=50,
              ylabel="Gradient L2 norm", legend=True),
        Panel("(b)", _lines("tpo", "grpo"), MECH, y="q_success", y2="q_fail", smooth=50,
              ylabel="Weight proxy", legend=True),
    ), "H 8, K 32: (a) GRPO's first-epoch gradient norm stays large (peaks ~140) all "
       "run; TPO's (4 and 1 epochs), PPO's and DG's stay near zero. (b) Weight on successful "
       "(solid) vs failed (dashed) candidates: TPO's target mass on failures vanishes by "
       "episode ~150; GRPO's |A| on failures stays ~0.5-2.", companion="mechanism_h8"),
    _mech("all_fail", 11, "diagnostics", (
        Panel("(a)", _lines("tpo", "grpo", "grpo_no_kl"), MECH, y="all_fail_frac", smooth=50,
              ylim=(-0.05, 1.05), ylabel="All-fail fraction", legend=True),
        Panel("(b)", (*EPOCHS_14, *_lines(*TERM[1:])), MECH, y="success_prompt_frac", smooth=50,
              ylim=(-0.05, 1.05), ylabel="Success fraction", legend=True),
    ), "H 8, K 32: (a) ~90 % of groups all-fail at the start; TPO's fraction reaches ~0 by "
       "episode ~250, GRPO's by ~600 with a residual, GRPO (no KL)'s climbs back to ~0.4. "
       "(b) Fraction of prompts with a success: TPO ~1 by episode 200, GRPO ~0.9, DG ~0.85 "
       "late.", companion="mechanism_h8"),
    PaperFigure("k_sweep", 12, "k_sweep", (
        Panel("(a) TPO", _shades("tpo", "K", (4, 8, 16, 32, 64), "$K$={}"), MECH | {"K": None},
              ylim=(0, 0.55), smooth=50, legend=True),
        Panel("(b) GRPO", _shades("grpo", "K", (4, 8, 16, 32, 64), "$K$={}"), MECH | {"K": None},
              ylim=(0, 0.55), smooth=50, legend=True),
        Panel("(c)", _lines("tpo", "grpo"), MECH | {"K": None}, kind="final", x="K",
              xs=(4, 8, 16, 32, 64), xlabel="Candidates $K$", ylabel="Final error", legend=True),
    ), 3, "H 8, epochs 4, K 4-64, 30 seeds: (a) TPO improves steadily with K; (b) GRPO "
          "improves less and less monotonically; (c) final error, TPO 8.9 % -> 0.36 %, GRPO "
          "19.4 % -> 4.4 % at K 32, 5.6 % at K 64.", size=(3.2, 2.5), legend="panels",
        companion="k_sweep", seeds=30),
    PaperFigure("zero_variance_masking", 13, "zero_variance_masking", (
        Panel("(a)", _lines("tpo", "grpo", "grpo_masked"), MECH | {"epochs": 4}, smooth=50,
              ylim=(-0.02, 1.02), legend=True),
        Panel("(b)", _lines("tpo", "grpo", "grpo_masked"), MECH | {"epochs": 4}, kind="bars",
              xlabel="", ylabel="Final error"),
    ), 2, "H 8, K 32, 4 epochs, 30 seeds: (a) TPO lowest from episode ~100; GRPO (zv-masked) "
          "above GRPO throughout; (b) final error TPO 0.05 %, GRPO 6.3 %, masked 29.7 %.",
        size=(3.4, 2.6), legend="panels", companion="zero_variance_masking", seeds=30),
    _mech("multiepoch", 14, "diagnostics", (
        Panel("(a)", (*EPOCHS_14, Line("dg")), MECH | {"epochs": None}, smooth=50, ylim=(-0.02, 1.02),
              legend=True),
        Panel("(b)", (*EPOCHS_14, Line("dg")), MECH | {"epochs": None}, y="grad_norm", smooth=50,
              ylabel="Gradient L2 norm", legend=True),
    ), "H 8, K 32: (a) TPO at 4 epochs reaches 0.2 % by episode 400, at 1 epoch 1.1 %; DG "
       "plateaus at 14 %. (b) TPO (4 ep)'s gradient norm decays first, TPO (1 ep) spikes "
       "later (~12); DG's stays low.", companion="mechanism_h8"),
    PaperFigure("epoch_sweep", 15, "epoch_sweep", (
        Panel("(a) TPO", _shades("tpo", "epochs", (1, 2, 4, 8, 16), "{} ep"), MECH | {"epochs": None},
              ylim=(0, 0.55), smooth=50, legend=True),
        Panel("(b) GRPO", _shades("grpo", "epochs", (1, 2, 4, 8, 16), "{} ep"), MECH | {"epochs": None},
              ylim=(0, 0.55), smooth=50, legend=True),
        Panel("(c)", _lines("tpo", "grpo"), MECH | {"epochs": None}, kind="final", x="epochs",
              xs=(1, 2, 4, 8, 16), xlabel="Epochs", ylabel="Final error", legend=True),
    ), 3, "H 8, K 32, epochs 1-16, 30 seeds: (a) TPO low at every count (< 2.3 %); (b) GRPO "
          "worst at 2 epochs (37.6 %), best at 16 (1.1 %); (c) final error vs epochs.",
        size=(3.2, 2.5), legend="panels", companion="epoch_sweep", seeds=30),
    PaperFigure("eta_sweep", 16, "eta_sweep", (
        Panel(r"TPO temperature ablation (reverse copy, $V$=2)",
              _hues("tpo_token", "eta", (0.25, 0.5, 1.0, 2.0, 4.0), 1.0, r"$\eta = {:g}$"),
              ylim=(0.0, 0.53), smooth=10, ylabel=SEQERR, legend=True),
    ), 1, "Bag-of-tokens reverse copy, V 2: every eta in 0.25-2 reaches ~0 within ~140 "
          "episodes; eta = 4 is slower (~250).", size=(4.2, 2.9), legend="panels",
        companion="eta_sweep", seeds=10),
    PaperFigure("dg_epochs", 17, "dg_epochs", (
        Panel("(a)", (Line("dg", {"epochs": 1}, "DG (1 ep)"), Line("dg", {"epochs": 4}, "DG (4 ep)", shade=-0.5)),
              {"reward": "terminal"}, ylim=(0, 1.02), smooth=40, legend=True),
        Panel("(b) Bag of tokens", (Line("dg", {"epochs": 1}, "DG (1 ep)"), Line("dg", {"epochs": 4}, "DG (4 ep)", shade=-0.5)),
              {"reward": "bag_of_tokens"}, kind="bars", x="target", xs=tuple(TARGET_NAMES),
              xlabel="Target logic", ylabel="Final error (%)", percent=True, seeds=10),
        Panel("(c) Sequential", (Line("dg", {"epochs": 1}, "DG (1 ep)"), Line("dg", {"epochs": 4}, "DG (4 ep)", shade=-0.5)),
              {"reward": "sequential"}, kind="bars", x="target", xs=tuple(TARGET_NAMES),
              xlabel="Target logic", ylabel="Final error (%)", percent=True, seeds=10),
    ), 3, "(a) Terminal reverse copy, 20 seeds: 1-epoch DG reaches 2.0 %, 4-epoch DG stays "
          "at 48.3 %. (b, c) Final error on the eight dense variants (10 seeds): 4 epochs "
          "worse in 7 of 8, most on sequential flip (0.07 % -> 4.56 %).",
        size=(3.2, 2.5), legend="panels", companion="dg_epochs", seeds=20, mosaic="aa;bc"),
]}
ORDER = sorted(PAPER, key=lambda n: PAPER[n].number)


def shade(color: str, t: float) -> str:
    """The method's colour (t = 0), lighter towards white (t > 0) or darker (t < 0)."""
    import matplotlib.colors as mc
    rgb = np.array(mc.to_rgb(color))
    if t == 0:
        return color
    return mc.to_hex(rgb + (1 - rgb) * t if t > 0 else rgb * (1 + t))


def line_style(line: Line) -> tuple[str, str, float]:
    own = look(line.algo)
    return line.color or shade(own.color, line.shade), own.ls, own.lw


def line_label(line: Line) -> str:
    return line.label or method_label(line.algo)


def _where(block: dict) -> dict:
    return {k: v for k, v in block.items() if v is not None}


def line_rows(sel: pd.DataFrame, panel: Panel, line: Line) -> pd.DataFrame:
    """One configuration of this line's method and setting in this panel."""
    cond = {**_where(panel.where), **line.where, "algo": line.algo}
    if algo_defaults(line.algo).get("k") == 1 and "K" not in line.where:
        cond.pop("K", None)  # a single-sample method has no group size to match
    if panel.kind != "curve" and panel.x:
        cond.pop(panel.x, None)
    sel = sel[experiments.matches(sel, cond)]
    if panel.model:  # the hub's name of the model, its folder's (either case)
        paths = sel["task.model_path"] if "task.model_path" in sel.columns else pd.Series("", index=sel.index)
        sel = sel[paths.fillna("").astype(str).map(lambda m: Path(m).name.lower()) == panel.model.lower()]
    return pick_config(sel) if panel.x == "" or panel.kind == "curve" else sel


def borrowed(panel: Panel, rows: pd.DataFrame) -> bool:
    """Whether a line of an interaction-matched panel is drawn from prompt-matched runs:
    a grouped method's, which already use B*K interactions an episode and are recorded
    under match=prompts (experiments.already_interaction_matched, as the report selects)."""
    return (panel.where.get("match") == "interactions" and not rows.empty
            and bool(experiments.already_interaction_matched(rows).all()))


@dataclass
class Drawn:
    hashes: set = field(default_factory=set)
    # legend label -> {(panel index, panel title, x category or None): seeds drawn}
    seeds: dict = field(default_factory=dict)
    paper: dict = field(default_factory=dict)  # panel index -> the paper's seeds per line there
    letters: dict = field(default_factory=dict)  # panel index -> its letter ("(b)"), where it has one
    # panel index -> the paper's lines not drawn there: (label, the x categories it lacks; () for all)
    absent: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)  # (panel index, x category or None) -> its name in the caption
    borrowed: dict = field(default_factory=dict)  # panel index -> labels drawn from prompt-matched runs
    progress: dict = field(default_factory=dict)  # panel index -> "label: episodes 0–N of T, running"
    lrs: dict = field(default_factory=dict)  # panel index -> {label: learning rates its runs used}

    def saw(self, at: int, label: str, rows: pd.DataFrame, panel: Panel) -> None:
        """What a drawn line tells its panel's note: borrowed runs, its learning rate."""
        if borrowed(panel, rows) and label not in self.borrowed.get(at, []):
            self.borrowed.setdefault(at, []).append(label)
        if "optim.lr" in rows.columns:
            self.lrs.setdefault(at, {}).setdefault(label, set()).update(rows["optim.lr"].dropna().unique())


def _band(ax, x, mean, se, color, scale):
    lo, hi = mean - se, mean + se
    if scale == "log":
        floor = 1e-8
        lo, hi = np.clip(lo, floor, None), np.clip(hi, floor, None)
    ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0)


def _curve(ax, p: Panel, sel, drawn: Drawn, at: int):
    handles = []
    for line in p.lines:
        rows = line_rows(sel, p, line)
        y1, y2 = PROXY.get(line.algo, (p.y, p.y2)) if p.y == "q_success" else (p.y, p.y2)
        label = line_label(line)
        if rows.empty or y1 not in rows.columns:
            drawn.absent.setdefault(at, []).append((label, ()))
            continue
        color, ls, lw = line_style(line)
        rows, under_way = figures.progress(rows)
        got = False
        for y, style in ((y1, ls), (y2, "--")):
            if not y or y not in rows.columns or rows[y].notna().sum() == 0:
                continue
            wide = stats.moving_average(stats.seed_curves(rows, y), p.smooth)
            if wide.empty:
                continue
            mean, se = stats.mean_se(wide)
            tail = "" if not y2 else (" winners" if y == y1 else " losers")
            h, = ax.plot(mean.index, mean.values, color=color, ls=style, lw=lw, label=label + tail)
            _band(ax, mean.index, mean.values, se.values, color, p.scale)
            handles.append(h)
            got = True
            drawn.hashes |= set(rows["config_hash"])
            drawn.seeds.setdefault(label, {})[(at, p.title, None)] = wide.shape[1]
        if not got:
            drawn.absent.setdefault(at, []).append((label, ()))
            continue
        drawn.saw(at, label, rows, p)
        if under_way:
            drawn.progress.setdefault(at, []).append(f"{label}: {under_way}")
    return handles


def _final(rows: pd.DataFrame, y: str = "error"):
    f = stats.final_stats(stats.seed_curves(rows, y))
    return None if f is None else (f.mean, f.se, f.n_seeds)


def _points(ax, p: Panel, sel, drawn: Drawn, at: int):
    """final: the final error (seed mean +- SE) of each line over x; bars: one bar per
    line (and x category)."""
    handles, col = [], ALIASES.get(p.x, p.x)
    cats = list(p.xs) if p.xs else [None]
    width = 0.8 / len(p.lines) if p.kind == "bars" and p.x else 0.7
    done = figures.completed(sel)  # a run under way has no final value

    def at_x(frame, line, xv):
        rows = line_rows(frame, p, line)
        if xv is not None:
            rows = pick_config(rows[rows[col] == xv]) if col in rows.columns else rows.iloc[:0]
        return rows

    for j, line in enumerate(p.lines):
        color, ls, lw = line_style(line)
        label = line_label(line)
        xs, ys, es, lacking = [], [], [], []
        for i, xv in enumerate(cats):
            rows = at_x(done, line, xv)
            _, under_way = figures.final_rows(at_x(sel, line, xv))
            if under_way:
                drawn.progress.setdefault(at, []).append(
                    f"{label}{'' if xv is None else ' at ' + _x_name(p, xv)}: {under_way}")
            got = None if rows.empty else _final(rows)
            if got is None:
                if not under_way:
                    lacking.append(xv)
                continue
            scale = 100 if p.percent else 1
            xs.append(xv if p.kind == "final" else (i + (j - (len(p.lines) - 1) / 2) * width if p.x else j))
            ys.append(got[0] * scale)
            es.append(got[1] * scale)
            drawn.hashes |= set(rows["config_hash"])
            drawn.seeds.setdefault(label, {})[(at, p.title, xv)] = got[2]
            drawn.saw(at, label, rows, p)
            if xv is not None:
                drawn.names[(at, xv)] = f"{drawn.names.get((at, None), p.title)} {_x_name(p, xv)}"
        if lacking:
            drawn.absent.setdefault(at, []).append((label, () if not xs else tuple(lacking)))
        if not xs:
            continue
        if p.kind == "final":
            h = ax.errorbar(xs, ys, yerr=es, color=color, ls=ls, lw=lw, marker=look(line.algo).marker, ms=4,
                            capsize=3, label=label)
        else:
            h = ax.bar(xs, ys, width=width, yerr=es, color=color, alpha=0.85, capsize=3,
                       error_kw={"ecolor": "k", "lw": 1.2}, label=label)
        handles.append(h)
    if p.kind == "final" and p.xs:
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(p.xs), [str(v) for v in p.xs])
        ax.minorticks_off()
    elif p.kind == "bars":
        if p.x:
            ax.set_xticks(range(len(cats)), [TARGET_NAMES.get(c, str(c)) for c in cats],
                          rotation=15, ha="right")
        else:
            ax.set_xticks(range(len(p.lines)), [line_label(l) for l in p.lines],
                          rotation=15, ha="right")
    return handles


def _empty(ax, text: str):
    import textwrap
    text = "\n".join(textwrap.fill(part, 34) for part in text.split("\n"))
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=7.5, color="#555555",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _how(spec: PaperFigure) -> str:
    exp = spec.experiment if spec.experiment in experiments.EXPERIMENTS else None
    how = experiments.how_to_run(exp) if exp and exp != "diagnostics" else ""
    if spec.experiment == "diagnostics":
        how = "`python -m bench -m +experiment=epoch_sweep` (or mechanism_diagnostics)"
    return how.replace("`", "").replace(" -m +", " -m\n+").replace(" (or", "\n(or")


def _why_empty(spec: PaperFigure, p: Panel, names=()) -> str:
    """An empty panel's text: the metric no run records, or which of the paper's lines
    are not run and how to run them."""
    if p.missing:  # every line lacks it
        return f"{', '.join(line_label(l) for l in p.lines)}: {p.missing}"
    how = _how(spec)
    return (f"{', '.join(names)}: " if names else "") + "not run" + (":\n" + how if how else "")


def _x_name(p: Panel, xv) -> str:
    return TARGET_NAMES.get(xv, f"{p.x} = {xv}" if p.x else str(xv))


def absent_note(p: Panel, absent) -> str:
    """The paper's lines a drawn panel lacks: "DG, PPO: not run", and a line per method
    that lacks some x categories ("DG (4 ep): not run at Copy, Flip")."""
    whole = [label for label, xs in absent if not xs]
    return "\n".join([*([", ".join(whole) + ": not run"] if whole else []),
                      *(f"{label}: not run at " + ", ".join(_x_name(p, x) for x in xs)
                        for label, xs in absent if xs)])


def panel_note(p: Panel, drawn: Drawn, at: int) -> str:
    """What a drawn panel says of its lines, inside it: the paper's lines it lacks
    (absent_note); lines drawn from prompt-matched runs (borrowed); lines of runs under
    way ("TPO: episodes 0–500 of 2,000, running"); the learning rates, where its lines'
    differ."""
    said = [absent_note(p, drawn.absent[at])] if drawn.absent.get(at) else []
    if drawn.borrowed.get(at):
        said.append(f"{', '.join(drawn.borrowed[at])}: prompt-matched runs (same configuration)")
    said += drawn.progress.get(at, [])
    lrs = drawn.lrs.get(at, {})
    if len(set().union(*lrs.values())) > 1:
        by: dict = {}
        for label, values in lrs.items():
            by.setdefault(", ".join(fmt(v) for v in sorted(values)), []).append(label)
        said.append("lines mix learning rates: " + "; ".join(f"{', '.join(ls)} {v}" for v, ls in by.items()))
    return "\n".join(said)


def panel_name(spec: PaperFigure, p: Panel, ax) -> str:
    """A panel's name in the caption: its letter; in a grid, its row's label and its
    column's title; else its title (without TeX's $)."""
    plain = lambda t: " ".join(t.replace("$", "").replace("\\", "").split())  # noqa: E731
    letter, _ = split_letter(p.title)
    if letter:
        return letter
    if spec.row_labels:
        spot = ax.get_subplotspec()
        row = (spec.row_names or spec.row_labels)[spot.rowspan.start]
        return f"{plain(row)} {plain(spec.panels[spot.colspan.start].title)}"
    return plain(p.title)


def split_letter(title: str) -> tuple[str, str]:
    """("(b)", "GRPO") of "(b) GRPO"; ("", title) for a title without a panel letter."""
    if title.startswith("(") and ")" in title[:4]:
        letter, _, rest = title.partition(")")
        return letter + ")", rest.strip()
    return "", title


def seed_note(drawn: Drawn) -> str:
    """Our seed counts: one number per method where it is the same in every panel, a
    number per lettered panel, or else per panel ("H = 10: TPO 20, DG 3*"; panels alike
    named together); a count below the paper's seeds per line there is starred, and the
    note says the paper's count."""
    below = lambda key, n: n < drawn.paper.get(key[0], 0)  # noqa: E731
    short = any(below(k, n) for per in drawn.seeds.values() for k, n in per.items())
    star = lambda hit: "*" if hit else ""  # noqa: E731
    if not drawn.seeds:
        return "Ours: no runs" + (f"; the paper's: {paper_seeds(drawn)} seeds per line" if paper_seeds(drawn) else "")
    lettered = all(k[1].startswith("(") and k[2] is None for per in drawn.seeds.values() for k in per)
    if all(len(set(per.values())) == 1 for per in drawn.seeds.values()):
        parts = [f"{label} {next(iter(per.values()))}{star(any(below(k, n) for k, n in per.items()))}"
                 for label, per in drawn.seeds.items()]
        text = "Ours, mean ± 1 SE over seeds: " + ", ".join(parts)
    elif lettered:  # a method's count, or its count in each lettered panel
        parts = [f"{label} " + (f"{next(iter(per.values()))}{star(any(below(k, n) for k, n in per.items()))}"
                                if len(set(per.values())) == 1 else
                                ", ".join(f"{n}{star(below(k, n))} {k[1].split(')')[0]})" for k, n in per.items()))
                 for label, per in drawn.seeds.items()]
        text = "Ours, mean ± 1 SE over seeds: " + ", ".join(parts)
    else:
        places: dict = {}  # (panel index, x category) -> [(label, seeds, starred)]
        for label, per in drawn.seeds.items():
            for k, n in per.items():
                places.setdefault((k[0], k[2]), []).append((label, n, below(k, n)))
        groups: dict = {}  # the counts' text -> the panels that have them
        for place in sorted(places, key=lambda pl: pl[0]):  # stable: a panel's x in drawn order
            got = places[place]
            counts = (f"{got[0][1]}{star(got[0][2])} per line" if len({(n, b) for _, n, b in got}) == 1
                      else ", ".join(f"{label} {n}{star(b)}" for label, n, b in got))
            groups.setdefault(counts, []).append(drawn.names.get(place, drawn.names.get((place[0], None), "")))
        text = "Ours, mean ± 1 SE over seeds, per panel: " + "; ".join(
            f"{', '.join(names)}: {counts}" for counts, names in groups.items())
    return text + (f"; the paper's: {paper_seeds(drawn)} per line" if paper_seeds(drawn) else "") \
        + (", * fewer here" if short else "")


def paper_seeds(drawn: Drawn) -> str:
    """The paper's seeds per line: "20", or per lettered panel where they differ
    ("20 (a), 10 (b, c)")."""
    counts = {at: n for at, n in drawn.paper.items() if n}
    if len(set(counts.values())) <= 1:
        return str(next(iter(counts.values()), ""))
    by = {}
    for at, n in counts.items():
        by.setdefault(n, []).append(drawn.letters.get(at, "").strip("()") or str(at + 1))
    return ", ".join(f"{n} ({', '.join(ps)})" for n, ps in by.items())


def rows_for(spec: PaperFigure, df: pd.DataFrame) -> pd.DataFrame:
    if spec.experiment == "llm":
        return df[df["task.impl"] == "llm"] if "task.impl" in df.columns else df.iloc[:0]
    if spec.experiment == "diagnostics":  # every method the mechanism study's runs have
        return df[experiments.matches(df, experiments.terminal(H=8, B=256, hold=()))]
    return experiments.select(df, spec.experiment)


def _grid(spec: PaperFigure, n: int):
    """(figure, one axes per panel): spec.mosaic's layout, or rows of spec.ncols."""
    if spec.mosaic:
        rows = spec.mosaic.split(";")
        nrows, ncols = len(rows), len(rows[0])
        fig = plt.figure(layout="constrained", figsize=(spec.size[0] * ncols, spec.size[1] * nrows + 0.6))
        named = fig.subplot_mosaic(spec.mosaic.replace(";", "\n"))
        return fig, [named[k] for k in sorted(named)][:n], ncols
    ncols = min(spec.ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(spec.size[0] * ncols, spec.size[1] * nrows + 0.6))
    for ax in axes.flat[n:]:
        ax.remove()
    return fig, list(axes.flat[:n]), ncols


def render(name: str, df: pd.DataFrame):
    """(figure, Drawn) of one paper figure in the paper's form; a panel without runs is
    drawn empty, saying what to run, and a panel missing some of the paper's lines names
    them inside it."""
    spec = PAPER[name]
    sel = rows_for(spec, df)
    panels = list(spec.panels)
    if spec.experiment == "llm":  # the paper's panels, each drawn or saying "not run", then ours
        panels += llm_panels(sel, skip={p.where.get("task.dataset") for p in panels})
    drawn = Drawn()
    with plt.rc_context(PAPER_RC):
        fig, axes, ncols = _grid(spec, len(panels))
        handles = {}
        for at, (ax, p) in enumerate(zip(axes, panels)):
            drawn.paper[at] = p.seeds or spec.seeds
            drawn.letters[at] = split_letter(p.title)[0]
            drawn.names[(at, None)] = panel_name(spec, p, ax)
            got = [] if p.missing else (_curve if p.kind == "curve" else _points)(ax, p, sel, drawn, at)
            for h in got:
                handles.setdefault(h.get_label(), h)
            letter, rest = split_letter(p.title)
            # the mechanism figures' panel letter sits inside the panel, the rest above it
            if spec.legend == "panels" and letter:
                ax.text(0.03, 0.95, letter, transform=ax.transAxes, fontweight="bold", va="top")
                ax.set_title(rest)
            else:
                ax.set_title(p.title)
            spot = ax.get_subplotspec()
            col, row = spot.colspan.start, spot.rowspan.start
            # a grid names its x axis under the bottom row only, as the paper's do
            ax.set_xlabel(p.xlabel if not spec.row_labels or spot.is_last_row() else "")
            if spec.row_labels:
                ax.set_ylabel(spec.row_labels[row] if col == 0 else "")
            elif col == 0 or spec.legend == "panels" or p.ylabel != panels[0].ylabel:
                ax.set_ylabel(p.ylabel)
            absent = drawn.absent.get(at, [])
            if not got:
                whole = [label for label, xs in absent if not xs]
                under_way = drawn.progress.get(at, [])
                why = (_why_empty(spec, p, whole if p.lines and len(whole) == len(p.lines) else ())
                       if not under_way else absent_note(p, absent))
                _empty(ax, "\n".join(filter(None, [why, *under_way])))
                continue
            ax.set_yscale(p.scale)
            if p.ylim:
                ax.set_ylim(*p.ylim)
            if p.xlim:
                ax.set_xlim(*p.xlim)
            elif p.kind == "curve":
                ax.set_xlim(left=0)
            if p.legend and spec.legend == "panels":
                ax.legend(fontsize=7)
                figures.note_inside(ax, "", "legend")  # placed where it hides the fewest line pixels
            if note := panel_note(p, drawn, at):
                figures.note_inside(ax, note, "notes", fontsize=6.5, labelcolor="#444444")
        if spec.legend in ("top", "bottom") and handles:
            fig.legend(list(handles.values()), list(handles), ncols=min(len(handles), 6),
                       loc=f"outside {'upper' if spec.legend == 'top' else 'lower'} center",
                       frameon=True)
        note = seed_note(drawn) + (f". {spec.label}" if spec.label else "")
        # a caption line (the paper's figures have none): our seed counts, off the legend's
        # side, broken into lines the figure's width holds
        (fig.supxlabel if spec.legend == "top" else fig.suptitle)(
            note, fontsize=6.5, color="#444444", x=0.01, ha="left")
        fit_figure_texts(fig)
    return fig, drawn


def llm_panels(sel: pd.DataFrame, skip=()) -> list[Panel]:
    """A panel per dataset of our LLM runs that none of the paper's panels shows (skip:
    the paper's datasets): held-out pass@1 (accuracy) against step, a line per method;
    its title says it is ours."""
    if sel.empty or "task.dataset" not in sel.columns:
        return []
    out = []
    for ds, d in sel.groupby("task.dataset", sort=True):
        if ds in skip:
            continue
        algos = [a for a in PAPER_METHODS if a in set(d["algo.name"])] + sorted(
            set(d["algo.name"]) - set(PAPER_METHODS))
        y = "pass_at_1" if "pass_at_1" in d.columns and d["pass_at_1"].notna().any() else "reward_mean"
        out.append(Panel(f"{ds} (ours, CPU model)", _lines(*algos), {"task.dataset": ds}, y=y,
                         xlabel="Step", ylabel="Held-out pass@1" if y == "pass_at_1" else "Mean score",
                         ylim=(0, 1)))
    return out


def _save(fig, path: Path, dpi: int) -> list[Path]:
    paths = []
    for ext in ("png", "pdf"):
        paths.append(path.with_suffix(f".{ext}"))
        # the paper's type as drawn and measured: a family resolves to a face when drawn
        with plt.rc_context(PAPER_RC):
            io.save_figure(fig, paths[-1], dpi=png_dpi(fig, dpi), metadata={"CreationDate": None} if ext == "pdf" else None)
    figures.compact_png(paths[0])
    plt.close(fig)
    return paths


# name -> (the table it drew from, the config hashes it drew): a companion several figures
# share renders each sibling once per table, not once per figure that draws it
DRAWN_FROM: dict[str, tuple[weakref.ref, frozenset]] = {}


def _remember(name: str, df: pd.DataFrame, drawn: Drawn) -> frozenset:
    DRAWN_FROM[name] = (weakref.ref(df), frozenset(drawn.hashes))
    return DRAWN_FROM[name][1]


def drawn_hashes(name: str, df: pd.DataFrame) -> frozenset:
    """The config hashes figure `name` draws from df (rendered, unless this table drew it)."""
    seen = DRAWN_FROM.get(name)
    if seen is not None and seen[0]() is df:
        return seen[1]
    fig, drawn = render(name, df)
    plt.close(fig)
    return _remember(name, df, drawn)


def draw(name: str, df: pd.DataFrame, out_dir, dpi: int = DPI, info: dict | None = None) -> list[Path]:
    """Draw a paper figure as `<name>.png/.pdf` and, where the experiment ran more than
    the paper's lines, `<name>_companion.png/.pdf`; returns the paths (PNG, then PDF, of
    each). info: given a dict, its "drawn" is set to the figure's Drawn."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = PAPER[name]
    fig, drawn = render(name, df)
    _remember(name, df, drawn)
    if info is not None:
        info["drawn"] = drawn
    paths = _save(fig, out_dir / name, dpi)
    if spec.companion:
        # one file for a companion several figures share (Figures 10, 11, 14: mechanism_h8):
        # the runs none of them draws, titled with all of them, so whichever figure draws it
        # last the file is the same
        siblings = [s for s in PAPER.values() if s.companion == spec.companion]
        numbers = sorted(s.number for s in siblings)
        shared = len(numbers) > 1
        hashes = set(drawn.hashes)
        for other in siblings if shared else ():
            if other.name != name:
                hashes |= drawn_hashes(other.name, df)
        rest = df[~df["config_hash"].isin(hashes)]
        which = (f"Figures {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}: our runs not "
                 "in the paper's figures" if shared
                 else f"Figure {spec.number}: our runs not in the paper's figure")
        try:
            comp = figures.render(spec.companion, rest, title=f"Companion to {which}")
        except figures.NoData:
            return paths
        paths += _save(comp, out_dir / (spec.companion if shared else f"{name}_companion"), dpi)
    return paths
