"""Plot error vs. step per task from the collected table, and print a summary table.

    python analysis/plot.py [--results FILE] [--out DIR] [--yscale {auto,log,linear}]
    python analysis/plot.py --figure NAME [NAME ...] [--results FILE] [--out DIR]
    python analysis/plot.py --list

Without --figure: one figure per task. With it: the paper's figures in SPEC 5's layout
(analysis/paper/figures.py; `all` draws every one that has results), or `leaderboard`
(analysis/leaderboard.py: every method and task of the table, with its default settings).

One line per (algo.name, config_hash): the seed mean with a +-1 standard-error band,
SE = std(ddof=0) / sqrt(n_seeds) as in the paper. Different config hashes are never pooled.
"""
import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import leaderboard
from analysis.collect import GROUP, last_step, os_errors_in_one_line, read_results, warn_if_stale
from analysis.labels import compact_labels, label_text, legend_labels, se_text, title_items
from analysis.paper import figures
from analysis.style import (COLUMN_IN, LINESTYLES, LOG_FLOOR, TITLE_PT, color_for, legend_below,
                            plt, threshold_line, wrap)
from contract import io
# The statistics live in stats.py (shared with the paper report); re-exported here for callers.
from analysis.stats import THRESHOLD, mean_se, seed_curves, seed_hits, steps_to_threshold  # noqa: F401


# Figures of other modules than the paper's: name -> module with TITLE, draw(df, out_dir), NoData.
OTHER_FIGURES = {leaderboard.NAME: leaderboard}


def linear_by_default(task: str) -> bool:
    # The paper draws terminal-reward H-sweeps and the vocab sweep on a linear axis.
    return task.startswith(("reverse_h", "reversal_v"))


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
        held = seed_curves(g, "test_error") if "test_error" in g.columns else pd.DataFrame()
        if last is not None:
            held = held.loc[:last]
        held_mean, held_se = mean_se(held)
        rows.append({
            **dict(zip(GROUP, key)),
            "label": labels[key],
            "n_seeds": n,
            "final_step": wide.index[-1] if len(wide) else pd.NA,
            "final_error_mean": mean.iloc[-1] if len(wide) else np.nan,
            "final_error_se": se.iloc[-1] if len(wide) else np.nan,
            "steps_to_1pct": pd.NA if hit is None else hit,
            "seeds_below_1pct": seed_hits(seed_curves(g, common=False), thr).n_reached,
            # the held-out error where the task evaluates: at its first and last common step
            "first_test_error": held_mean.iloc[0] if len(held) else np.nan,
            "final_test_error_mean": held_mean.iloc[-1] if len(held) else np.nan,
            "final_test_error_se": held_se.iloc[-1] if len(held) else np.nan,
        })
    out = pd.DataFrame(rows)
    out["steps_to_1pct"] = out["steps_to_1pct"].astype("Int64")
    return out


def format_summary(summary: pd.DataFrame) -> str:
    """Printable per-task tables."""
    blocks = []
    for task, t in summary.groupby("task.name", sort=True):
        held = t["final_test_error_mean"].notna().any()
        lines = [f"== {task}", f"{'line':<50} {'final error':>22} {'steps to 1%':>12} {'seeds <1%':>12}"
                 + (f" {'held-out error first -> final':>32}" if held else "")]
        for _, r in t.iterrows():
            # One seed has no spread to show: "± 0.0000" would read as a measured zero.
            spread = f" ± {r.final_error_se:.4f}" if r.n_seeds > 1 else ""
            final = f"{r.final_error_mean:.4f}{spread} @{r.final_step}"
            hit = "—" if pd.isna(r.steps_to_1pct) else str(r.steps_to_1pct)
            below = f"{r.seeds_below_1pct}/{r.n_seeds} seeds"
            line = f"{r.label:<50} {final:>22} {hit:>12} {below:>12}"
            if held:
                spread = f" ± {r.final_test_error_se:.4f}" if r.n_seeds > 1 else ""
                line += f" {f'{r.first_test_error:.4f} -> {r.final_test_error_mean:.4f}{spread}':>32}"
            lines.append(line)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _filename(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", task) or "task"


def panels_of(t: pd.DataFrame) -> list[tuple[str, str]]:
    """(column, axis label) of each panel: the training error, and the held-out error where
    the task evaluates one (MNIST's test file, the LLM tasks' 1 - pass@1)."""
    held_out = "test_error" in t.columns and t["test_error"].notna().any()
    return [("error", "error")] + ([("test_error", "held-out error")] if held_out else [])


def render_task(task: str, t: pd.DataFrame, scale: str = "log", thr: float = THRESHOLD):
    """The figure of one task: error against step, a line per (algorithm, config hash);
    beside it the held-out error, where the task has one."""
    items = title_items(t)
    per_line = [c for c, text in items if text.endswith("per line")]
    parts = compact_labels(t, per_line)
    panels = panels_of(t)
    fig, axes = plt.subplots(1, len(panels), figsize=(COLUMN_IN * len(panels), 2.9),
                             layout="constrained", squeeze=False)
    keys = [key for key, _ in t.groupby(GROUP, sort=True)]
    # one linestyle per line across the panels, varied within an algorithm's colour
    styles = {key: LINESTYLES[[k[1] for k in keys[:i]].count(key[1]) % len(LINESTYLES)]
              for i, key in enumerate(keys)}
    first: dict[tuple, tuple] = {}  # key -> (its first line, label parts, seeds): the legend's
    for (y, ylabel), ax in zip(panels, axes[0]):
        for key, g in t.groupby(GROUP, sort=True):
            algo = key[1]
            wide = seed_curves(g, y)
            if wide.empty:
                continue
            mean, se = mean_se(wide)
            lo, hi = mean - se, mean + se
            if scale == "log":
                lo, hi = lo.clip(lower=LOG_FLOOR), hi.clip(lower=LOG_FLOOR)
            line, = ax.plot(mean.index, mean.values, color=color_for(algo), ls=styles[key], lw=1.5)
            ax.fill_between(mean.index, lo.values, hi.values, color=color_for(algo), alpha=0.2, lw=0)
            first.setdefault(key, (line, *parts[key], wide.shape[1]))
        ax.set_yscale(scale)
        threshold_line(ax, thr)
        ax.set_xlabel("episode")
        ax.set_ylabel(ylabel)
        ax.set_title(task if len(panels) == 1 else f"{task}: {ylabel}", fontsize=TITLE_PT)
        ax.grid(True, which="major", alpha=0.3)
    drawn = [first[key] for key in keys if key in first]
    ns = [n for *_, n in drawn]
    # one seed count for every line: the caption says it; otherwise each label does
    for line, algo, p, n in drawn:
        line.set_label(label_text(algo, p, None if len(set(ns)) == 1 else n))
    handles = [d[0] for d in drawn]
    fig.suptitle("\n".join(filter(None, [wrap(text for _, text in items), se_text(ns)])),
                 fontsize=TITLE_PT)
    if handles:
        legend_below(fig, handles, [h.get_label() for h in handles],
                     ax=axes[0][0] if len(panels) == 1 else None)
    return fig


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


@os_errors_in_one_line
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="outputs/results.parquet", help="table from analysis/collect.py")
    parser.add_argument("--out", default="outputs/plots", help="directory for the figures")
    parser.add_argument("--yscale", choices=["auto", "log", "linear"], default="auto")
    parser.add_argument("--figure", nargs="+", metavar="NAME",
                        help="draw these paper figures (see --list; 'all' for every one)")
    parser.add_argument("--list", action="store_true", help="name the paper figures and exit")
    parser.add_argument("--split-code", action="store_true",
                        help="draw seeds of one config run under different code as separate lines")
    args = parser.parse_args(argv)

    if args.list:
        for name, spec in figures.FIGURES.items():
            print(f"{name:<24} {spec.title} ({len(spec.panels)} panel{'s' * (len(spec.panels) > 1)})")
        for name, module in OTHER_FIGURES.items():
            print(f"{name:<24} {module.TITLE} (not in 'all')")
        return 0
    known = [*figures.FIGURES, *OTHER_FIGURES]
    unknown = sorted(set(args.figure or ()) - set(known) - {"all"})
    if unknown:
        print(f"error: unknown figure(s) {', '.join(unknown)}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2

    warn_if_stale(args.results)
    df = read_results(args.results, "nothing to draw", split_code=args.split_code)
    if isinstance(df, int):  # missing, empty or not the collected table: nothing drawn
        return df
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
    every = "all" in names
    names = list(figures.FIGURES) if every else list(dict.fromkeys(names))
    drawn, missing = 0, 0
    for name in names:
        other = OTHER_FIGURES.get(name)
        try:
            paths = other.draw(df, out_dir) if other else figures.draw(name, df, out_dir)
        except (other.NoData if other else figures.NoData) as e:
            print(f"{'skipped' if every else 'error'}: {e}", file=sys.stderr)
            missing += 1
            continue
        drawn += 1
        for path in paths:
            print(f"wrote {path}")
    return 1 if (missing and not every) or not drawn else 0


if __name__ == "__main__":
    sys.exit(main())
