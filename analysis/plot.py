"""Plot error vs. step per task from the collected table, and print a summary table.

    python analysis/plot.py [--results FILE] [--out DIR] [--yscale {auto,log,linear}]
    python analysis/plot.py --figure NAME [NAME ...] [--results FILE] [--out DIR]
    python analysis/plot.py --list

Without --figure: one figure per task. With it: the paper's figures in SPEC 5's layout
(analysis/figures.py; `all` draws every one that has results).

One line per (algo.name, config_hash): the seed mean with a +-1 standard-error band,
SE = std(ddof=0) / sqrt(n_seeds) as in the paper. Different config hashes are never pooled.
"""
import argparse
import re
import sys
import zlib
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.transforms  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.collect import last_step  # noqa: E402
from contract import io, schema  # noqa: E402
# The statistics live in stats.py (shared with report.py); re-exported here for callers.
from analysis.stats import THRESHOLD, mean_se, seed_curves, seed_hits, steps_to_threshold  # noqa: E402,F401

GROUP = ["task.name", "algo.name", "config_hash"]
REQUIRED = GROUP + ["seed", "step", "error"]
# Per-step metrics and row keys are never legend keys, even where they happen to be
# constant; nor is provenance: two lines differing only by commit are one configuration.
NOT_LEGEND = {*schema.METRIC_COLUMNS, *schema.ROW_KEYS, "task.name", "algo.name", "git_commit",
              "git_commits"}
LOG_FLOOR = 1e-4  # a log axis cannot show the band's lower edge at or below zero

# Fixed colours so an algorithm looks the same in every figure.
COLORS = {
    "tpo": "#1f77b4", "grpo": "#d62728", "dg": "#2ca02c", "pg": "#ff7f0e", "ppo": "#9467bd",
    "tpo_token": "#17becf", "grpo_token": "#e377c2", "tpo_no_anchor": "#aec7e8",
    "group_pg": "#bcbd22", "grpo_no_kl": "#ff9896", "grpo_masked": "#8c564b", "ce": "#7f7f7f",
}
FALLBACK = ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354"]
LINESTYLES = ["-", "--", ":", "-."]


def color_for(algo: str) -> str:
    # crc32 rather than hash(): Python's str hash changes between processes.
    return COLORS.get(algo, FALLBACK[zlib.crc32(algo.encode()) % len(FALLBACK)])


def linear_by_default(task: str) -> bool:
    # The paper draws terminal-reward H-sweeps and the vocab sweep on a linear axis.
    return task.startswith(("reverse_h", "reversal_v"))


def _fmt(v) -> str | None:
    if v is None or (np.ndim(v) == 0 and pd.isna(v)):
        return None
    if isinstance(v, (float, np.floating)):
        return f"{v:g}"
    return str(v)


def config_values(df: pd.DataFrame) -> pd.DataFrame:
    """One row per line (GROUP index), one column per config key, as display strings.

    A column counts as config only if it is constant within every line; that drops
    per-step metrics the runner may add later without this file knowing about them.
    """
    groups = df.groupby(GROUP, sort=True)
    keys = []
    for col in df.columns:
        if col in NOT_LEGEND:
            continue
        try:
            if (groups[col].nunique(dropna=False) <= 1).all():
                keys.append(col)
        except TypeError:  # list-valued config: unhashable, and too long for a legend anyway
            pass
    return groups[keys].first().map(_fmt)


PER_ALGORITHM = ("match", "batch_size_effective", "lr_effective")


def _differing(t: pd.DataFrame) -> list[str]:
    """The config keys that tell the lines of one task's table apart (config_values rows)."""
    # An algorithm's own knobs (algo.*) differ across algorithms by nature, and so do the
    # matching columns (under match=interactions only single-sample methods are scaled);
    # name them only where they tell lines of the same algorithm apart.
    algos = t.index.get_level_values("algo.name")
    return [c for c in t.columns if c != "algo.impl" and (
        t[c].dropna().nunique() > 1 if not (c.startswith("algo.") or c in PER_ALGORITHM)
        else (t[c].groupby(algos).nunique() > 1).any())]


def legend_labels(df: pd.DataFrame) -> dict:
    """Label per GROUP key: algo name, the config keys that differ between lines of the
    same task (ignoring lines where a key is absent, e.g. another algorithm's knob), n=seeds."""
    cfg = config_values(df)
    n_seeds = df.groupby(GROUP)["seed"].nunique()
    labels = {}
    for _, t in cfg.groupby(level="task.name"):
        differing = _differing(t)
        task_labels = {}
        for key, row in t.iterrows():
            parts = [f"{c}={row[c]}" for c in differing if pd.notna(row[c])]
            parts.append(f"n={n_seeds[key]}")
            task_labels[key] = f"{key[1]} ({', '.join(parts)})"
        # Same algo and same visible config but different hashes: tell them apart.
        counts = Counter(task_labels.values())
        for key, label in task_labels.items():
            labels[key] = label if counts[label] == 1 else f"{label[:-1]}, #{key[2][:6]})"
    return labels


# Legend and title names of config keys, in the paper's letters where it has one.
SHORT = {"task.sequence_length": "H", "task.vocab_size": "V", "task.batch_size": "B",
         "algo.k": "K", "task.delay": "D", "batch_size_effective": "B_eff",
         "lr_effective": "lr_eff"}
REWARDS = {"terminal": "terminal reward", "bag_of_tokens": "bag-of-tokens reward",
           "sequential": "sequential reward"}
FAMILIES = {"mnist": "MNIST bandit", "tabular_single": "tabular bandit, one context",
            "tabular_multi": "tabular bandit, many contexts"}
# What a title names, in this order; a key absent from a task's table is not its parameter.
TITLE_KEYS = ("task.target", "task.sequence_length", "task.vocab_size", "task.batch_size",
              "task.num_contexts", "task.num_actions", "task.baseline", "task.delay",
              "task.holdout", "algo.k")
def short_key(col: str) -> str:
    return SHORT.get(col) or col.removeprefix("task.").removeprefix("algo.")


def _title_value(col: str, values: list) -> str:
    v = _fmt(values[0])
    if col == "task.num_contexts":
        return f"{v} contexts"
    if col == "task.num_actions":
        return f"{v} actions"
    if col == "task.holdout":
        return f"{v} images held out for validation"
    if col == "task.target":
        return f"target {v}"
    return f"{short_key(col)} {v}"


def title_items(d: pd.DataFrame, skip=()) -> list[tuple[str, str]]:
    """(column, text) of the parameters of the task(s) drawn from d: "terminal reward",
    "H 10", "B 100", "K 8"; "K per line" where lines differ (their legend then names K).
    skip: columns another part of the figure shows (a swept x axis)."""
    items = []
    impl = d["task.impl"].dropna().unique() if "task.impl" in d.columns else []
    reward = d["task.reward"].dropna().unique() if "task.reward" in d.columns else []
    if "task.reward" not in skip and len(reward) == 1:
        items.append(("task.reward", REWARDS.get(reward[0], f"{reward[0]} reward")))
    elif "task.reward" not in skip and len(reward) > 1:
        items.append(("task.reward", "reward per line"))
    elif len(impl) == 1 and impl[0] in FAMILIES:
        items.append(("task.impl", FAMILIES[impl[0]]))
    for col in TITLE_KEYS:
        if col in skip or col not in d.columns:
            continue
        values = list((d[col].fillna(0) if col == "task.holdout" else d[col]).dropna().unique())
        if col == "task.holdout" and values == [0]:  # scored on the test file: the default
            continue
        if len(values) == 1:
            items.append((col, _title_value(col, values)))
        elif len(values) > 1:
            items.append((col, f"{short_key(col)} per line"))
    return items


def se_text(ns) -> str:
    """What the bands and bars are; ns: the seed count of each line drawn."""
    ns = sorted(set(ns))
    if len(ns) == 1:
        return f"mean ± 1 SE over {ns[0]} seed{'s' * (ns[0] != 1)}"
    return "mean ± 1 SE over n seeds (n per line)"


def compact_labels(df: pd.DataFrame, per_line=()) -> dict:
    """GROUP key -> (algo, parts): legend_labels' differing config keys as "K=8", without
    the seed count (the figure says it once when every line has the same). per_line:
    columns named on every line because the title says "per line" for them."""
    cfg = config_values(df)
    out = {}
    for _, t in cfg.groupby(level="task.name"):
        keys = list(dict.fromkeys([*_differing(t), *(c for c in per_line if c in t.columns)]))
        task_parts = {}
        for key, row in t.iterrows():
            parts = [f"{short_key(c)}={row[c]}" for c in keys if pd.notna(row[c])]
            # interaction matching scales a single-sample method's batch: the title's B is not its own
            own, given = row.get("batch_size_effective"), row.get("task.batch_size")
            if (own is not None and given is not None and pd.notna(own) and pd.notna(given)
                    and own != given and "batch_size_effective" not in keys):
                parts.append(f"B_eff={own}")
            task_parts[key] = (key[1], parts)
        counts = Counter((a, tuple(p)) for a, p in task_parts.values())
        for key, (algo, parts) in task_parts.items():
            out[key] = (algo, parts if counts[algo, tuple(parts)] == 1 else [*parts, f"#{key[2][:6]}"])
    return out


def label_text(algo: str, parts, n=None, tail: str = "") -> str:
    parts = [*parts, *([f"n={n}"] if n is not None else [])]
    return (f"{algo} ({', '.join(parts)})" if parts else algo) + tail


COLUMN_IN = 3.3  # a paper column: one panel is drawn this wide, so its text prints at size
LEGEND_PT = 7  # the smallest size legible in print at that width
TITLE_PT = 8


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


def expected_last_step(g: pd.DataFrame) -> int | None:
    """The step a complete run of this line ends at, from its config columns; None for a
    table without them (then the last step every seed logged stands in)."""
    if "task.episodes" not in g.columns:
        return None
    episodes = g["task.episodes"].dropna().unique()
    if len(episodes) != 1:
        return None
    every = g["task.eval_every"].dropna().unique() if "task.eval_every" in g.columns else []
    return last_step(int(episodes[0]), int(every[0]) if len(every) == 1 and every[0] > 0 else None)


def _missing_last(key, g: pd.DataFrame) -> str | None:
    last = expected_last_step(g)
    if last is None:
        return None
    have = set(g.loc[(g["step"] == last) & g["error"].notna(), "seed"])
    lacking = sorted(set(g["seed"]) - have)
    if not lacking:
        return None
    seeds = f"seed{'s' * (len(lacking) > 1)} {', '.join(str(s) for s in lacking)}"
    return (f"{key[1]} on {key[0]} (config {key[2]}): {seeds} of {g['seed'].nunique()} lack the "
            f"last step {last} (task.episodes={int(g['task.episodes'].dropna().iloc[0])}); an "
            f"earlier step is not its final error: finish or re-collect those runs")


def incomplete_groups(df: pd.DataFrame) -> dict[tuple, str]:
    """Lines some of whose seeds stop before the config's last step, with the reason."""
    out = {}
    for key, g in df.groupby(GROUP, sort=True):
        why = _missing_last(key, g)
        if why:
            out[key] = why
    return out


def summarise(df: pd.DataFrame, thr: float = THRESHOLD) -> pd.DataFrame:
    """One row per line: final error mean/SE at the config's last step (or, for a table
    without task.episodes, the last step all seeds logged), first step the seed-mean curve
    is below thr (NA if never), and how many seeds ever were. A line some of whose seeds
    lack the config's last step raises ValueError: its earlier steps are not final."""
    labels = legend_labels(df)
    rows = []
    for key, g in df.groupby(GROUP, sort=True):
        why = _missing_last(key, g)
        if why:
            raise ValueError(why)
        wide = seed_curves(g)
        last = expected_last_step(g)
        if last is not None:
            # Every seed logged it (above); a seed with rows past it does not move the end.
            wide = wide.loc[:last]
        mean, se = mean_se(wide)
        n = g["seed"].nunique()
        hit = steps_to_threshold(mean.index, mean.values, thr)
        rows.append({
            **dict(zip(GROUP, key)),
            "label": labels[key],
            "n_seeds": n,
            "final_step": wide.index[-1] if len(wide) else pd.NA,
            "final_error_mean": mean.iloc[-1] if len(wide) else np.nan,
            "final_error_se": se.iloc[-1] if len(wide) else np.nan,
            "steps_to_1pct": pd.NA if hit is None else hit,
            "seeds_below_1pct": seed_hits(seed_curves(g, common=False), thr).n_reached,
        })
    out = pd.DataFrame(rows)
    out["steps_to_1pct"] = out["steps_to_1pct"].astype("Int64")
    return out


def format_summary(summary: pd.DataFrame) -> str:
    """Printable per-task tables."""
    blocks = []
    for task, t in summary.groupby("task.name", sort=True):
        lines = [f"== {task}", f"{'line':<50} {'final error':>22} {'steps to 1%':>12} {'seeds <1%':>12}"]
        for _, r in t.iterrows():
            # One seed has no spread to show: "± 0.0000" would read as a measured zero.
            spread = f" ± {r.final_error_se:.4f}" if r.n_seeds > 1 else ""
            final = f"{r.final_error_mean:.4f}{spread} @{r.final_step}"
            hit = "—" if pd.isna(r.steps_to_1pct) else str(r.steps_to_1pct)
            below = f"{r.seeds_below_1pct}/{r.n_seeds} seeds"
            lines.append(f"{r.label:<50} {final:>22} {hit:>12} {below:>12}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _filename(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", task) or "task"


def render_task(task: str, t: pd.DataFrame, scale: str = "log", thr: float = THRESHOLD):
    """The figure of one task: error against step, a line per (algorithm, config hash)."""
    items = title_items(t)
    per_line = [c for c, text in items if text.endswith("per line")]
    parts = compact_labels(t, per_line)
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.9), layout="constrained")
    seen, drawn = {}, []  # algo -> lines drawn so far, to vary the linestyle within a colour
    for key, g in t.groupby(GROUP, sort=True):
        algo = key[1]
        wide = seed_curves(g)
        if wide.empty:
            continue
        mean, se = mean_se(wide)
        lo, hi = mean - se, mean + se
        if scale == "log":
            lo, hi = lo.clip(lower=LOG_FLOOR), hi.clip(lower=LOG_FLOOR)
        style = LINESTYLES[seen.get(algo, 0) % len(LINESTYLES)]
        seen[algo] = seen.get(algo, 0) + 1
        line, = ax.plot(mean.index, mean.values, color=color_for(algo), ls=style, lw=1.5)
        ax.fill_between(mean.index, lo.values, hi.values, color=color_for(algo), alpha=0.2, lw=0)
        drawn.append((line, *parts[key], wide.shape[1]))
    ax.set_yscale(scale)
    ns = [n for *_, n in drawn]
    # one seed count for every line: the caption says it; otherwise each label does
    for line, algo, p, n in drawn:
        line.set_label(label_text(algo, p, None if len(set(ns)) == 1 else n))
    handles = [d[0] for d in drawn]
    threshold_line(ax, thr)
    ax.set_xlabel("episode")
    ax.set_ylabel("error")
    ax.set_title(task, fontsize=TITLE_PT)
    fig.suptitle("\n".join(filter(None, [wrap(text for _, text in items), se_text(ns)])),
                 fontsize=TITLE_PT)
    ax.grid(True, which="major", alpha=0.3)
    if handles:
        legend_below(fig, handles, [h.get_label() for h in handles], ax=ax)
    return fig


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


def plot_results(df: pd.DataFrame, out_dir, yscale: str = "auto") -> list[Path]:
    """One figure per task, saved as PNG and PDF; returns the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, t in df.groupby("task.name", sort=True):
        scale = yscale if yscale != "auto" else ("linear" if linear_by_default(task) else "log")
        fig = render_task(task, t, scale)
        for ext in ("png", "pdf"):
            path = out_dir / f"{_filename(task)}.{ext}"
            io.save_figure(fig, path, dpi=150)
            paths.append(path)
        plt.close(fig)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="outputs/results.parquet", help="table from analysis/collect.py")
    parser.add_argument("--out", default="outputs/plots", help="directory for the figures")
    parser.add_argument("--yscale", choices=["auto", "log", "linear"], default="auto")
    parser.add_argument("--figure", nargs="+", metavar="NAME",
                        help="draw these paper figures (see --list; 'all' for every one)")
    parser.add_argument("--list", action="store_true", help="name the paper figures and exit")
    args = parser.parse_args(argv)

    # Imported here, not at the top: figures.py imports this module for its colours.
    from analysis import figures

    if args.list:
        for name, spec in figures.FIGURES.items():
            print(f"{name:<24} {spec.title} ({len(spec.panels)} panel{'s' * (len(spec.panels) > 1)})")
        return 0
    unknown = sorted(set(args.figure or ()) - set(figures.FIGURES) - {"all"})
    if unknown:
        print(f"error: unknown figure(s) {', '.join(unknown)}; known: {', '.join(figures.FIGURES)}",
              file=sys.stderr)
        return 2

    results = Path(args.results)
    if not results.is_file():
        print(f"error: results file {results} not found (run analysis/collect.py first)", file=sys.stderr)
        return 2
    df = pd.read_parquet(results)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        print(f"error: {results} lacks required columns: {', '.join(missing)}", file=sys.stderr)
        return 2
    if df.empty:  # nothing to draw: bad input, like a missing file
        print(f"error: {results} has no rows", file=sys.stderr)
        return 2
    refused = incomplete_groups(df)
    for why in refused.values():
        print(f"error: refused {why}", file=sys.stderr)
    if refused:
        df = df[~df.set_index(GROUP).index.isin(list(refused))]
        if df.empty:
            return 1
    if args.figure:
        return draw_figures(df, args.figure, args.out) or int(bool(refused))
    print(format_summary(summarise(df)))
    for path in plot_results(df, args.out, args.yscale):
        print(f"wrote {path}")
    return 1 if refused else 0


def draw_figures(df: pd.DataFrame, names, out_dir) -> int:
    """Draw the named paper figures; exit status 1 if a named one (or, for 'all', every
    one) has no results."""
    from analysis import figures

    every = "all" in names
    names = list(figures.FIGURES) if every else list(dict.fromkeys(names))
    drawn, missing = 0, 0
    for name in names:
        try:
            paths = figures.draw(name, df, out_dir)
        except figures.NoData as e:
            print(f"{'skipped' if every else 'error'}: {e}", file=sys.stderr)
            missing += 1
            continue
        drawn += 1
        for path in paths:
            print(f"wrote {path}")
    return 1 if (missing and not every) or not drawn else 0


if __name__ == "__main__":
    sys.exit(main())
