"""Plot error vs. step per task from the collected table, and print a summary table.

    python analysis/plot.py [--results FILE] [--out DIR] [--yscale {auto,log,linear}]
                            [--methods A,B] [--where KEY=VALUE ...] [--labels MAP] [--all-configs]
    python analysis/plot.py --figure NAME [NAME ...] [--add-runs ROOT ...] [--page FILE]
    python analysis/plot.py --list

Without --figure: one figure per task, a line per method (its configuration with the most
seeds), in percent; --where filters on a column by its short key (H, V, K, B, D, reward,
target, epochs, eta, match; H without reward: the terminal-reward tasks). The committed
table is read with the committed runs beside it (reproduction/runs/). With --figure: the
paper's figures in its form (analysis/paper/paper_figures.py), ours (figures.py), or
`leaderboard`; `all` draws every one; --page writes the comparison page (page.py); runs
under way under --add-runs are drawn as far as they got (never in a table or verdict).
A line is the seed mean +-1 SE band, SE = std(ddof=0) / sqrt(n_seeds) as in the paper.
"""
import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import Formatter, FuncFormatter

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis"
from . import leaderboard
from . import collect
from .collect import GROUP, last_step, os_errors_in_one_line, read_results, warn_if_stale
from .labels import SHORT, compact_labels, label_text, legend_labels, se_text, title_items
from .paper import figures
from .configs import pick_config
from .paper import paper_figures
from .configs import ALIASES
from .style import (COLUMN_IN, DPI, LINESTYLES, fit_figure_texts, png_dpi, LOG_FLOOR, TITLE_PT, legend_below, method_label,
                            method_styles, plt, threshold_line)
from ..contract import io
# The statistics live in stats.py (shared with the paper report); re-exported here for callers.
from .stats import THRESHOLD, mean_se, seed_curves, seed_hits, steps_to_threshold  # noqa: F401


# ticks in percent on linear and log axes alike ("0.1", "50"); the axis label says "(%)"
PERCENT = FuncFormatter(lambda y, _: f"{100 * y:.3g}")

class PercentWhereLabelled(Formatter):
    """A log axis' minor ticks in percent, on the ticks its own formatter labels (a
    narrow range labels some: "70", "80"); the rest stay bare."""

    def __init__(self, inner):
        self.inner = inner

    def set_axis(self, axis):
        super().set_axis(axis)
        self.inner.set_axis(axis)

    def set_locs(self, locs):
        self.inner.set_locs(locs)

    def __call__(self, y, pos=None):
        return PERCENT(y, pos) if self.inner(y, pos) else ""


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
    """Lines some of whose completed seeds stop before the config's last step, with the
    reason (a run under way, collect.in_progress's, is drawn as one)."""
    out = {}
    for key, g in collect.completed(df).groupby(GROUP, sort=True):
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


def relabel(summary: pd.DataFrame, labels: dict | None) -> pd.DataFrame:
    """The table's line names in --labels' words, as the figure's legend has them: a
    full line label mapped as given, else its method's name replaced."""
    if not labels:
        return summary
    def one(r):
        if r.label in labels:
            return labels[r.label]
        algo = r["algo.name"]
        return labels[algo] + r.label[len(algo):] if algo in labels and r.label.startswith(algo) else r.label
    return summary.assign(label=[one(r) for _, r in summary.iterrows()])


def format_summary(summary: pd.DataFrame) -> str:
    """Printable per-task tables, in percent, best line first (final error, then the
    steps to 1 %)."""
    blocks = []
    for task, t in summary.groupby("task.name", sort=True):
        t = t.sort_values(["final_error_mean", "steps_to_1pct", "label"], na_position="last", kind="stable")
        held = t["final_test_error_mean"].notna().any()
        lines = [f"== {task}  (final error = error at the last step; mean ± 1 SE over seeds)",
                 f"{'line':<44} {'final error':>20} {'steps to 1%':>12} {'seeds <1%':>12}"
                 + (f" {'held-out error first -> final':>34}" if held else "")]
        for _, r in t.iterrows():
            # One seed has no spread to show: "± 0.00" would read as a measured zero.
            spread = f" ± {pct(r.final_error_se)}" if r.n_seeds > 1 else ""
            final = f"{pct(r.final_error_mean)}{spread} % @{r.final_step}"
            hit = "—" if pd.isna(r.steps_to_1pct) else str(r.steps_to_1pct)
            below = f"{r.seeds_below_1pct}/{r.n_seeds} seeds"
            line = f"{r.label:<44} {final:>20} {hit:>12} {below:>12}"
            if held:
                spread = f" ± {pct(r.final_test_error_se)}" if r.n_seeds > 1 else ""
                line += f" {f'{pct(r.first_test_error)} -> {pct(r.final_test_error_mean)}{spread} %':>34}"
            lines.append(line)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def pct(fraction) -> str:
    """A fraction as percent with two decimals ("0.50" for 0.005)."""
    return f"{100 * fraction:.2f}"


def _filename(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", task) or "task"


def panels_of(t: pd.DataFrame) -> list[tuple[str, str]]:
    """(column, axis label) of each panel: the training error, and the held-out error where
    the task evaluates one (MNIST's test file, the LLM tasks' 1 - pass@1)."""
    held_out = "test_error" in t.columns and t["test_error"].notna().any()
    return [("error", "error")] + ([("test_error", "held-out error")] if held_out else [])


def one_config_per_line(t: pd.DataFrame) -> pd.DataFrame:
    """Of the lines of one method and task whose visible settings are the same (they differ only in
    their seed count or a key the legend does not show), the configuration with the most
    seeds: a second seed count is not a second line."""
    parts = compact_labels(t)
    keep = {}
    for key in sorted(parts):
        algo, p = parts[key]
        shown = (key[0], algo, tuple(x for x in p if not x.startswith("#")))
        keep.setdefault(shown, []).append(key[2])
    hashes = [pick_config(t[t["config_hash"].isin(h)])["config_hash"].iloc[0] for h in keep.values()]
    return t[t["config_hash"].isin(hashes)]


def render_task(task: str, t: pd.DataFrame, scale: str = "log", thr: float = THRESHOLD,
                labels: dict | None = None):
    """The figure of one task: error (in percent) against step, a line per (method, config
    hash), one colour per method; beside it the held-out error, where the task has one.
    labels: legend text per method name (or per full line label)."""
    items = title_items(t)
    per_line = [c for c, text in items if text.endswith("per line")]
    parts = compact_labels(t, per_line)
    panels = panels_of(t)
    fig, axes = plt.subplots(1, len(panels), figsize=(COLUMN_IN * len(panels), 2.9),
                             layout="constrained", squeeze=False)
    keys = [key for key, _ in t.groupby(GROUP, sort=True)]
    looks = method_styles(k[1] for k in keys)
    # one linestyle per line across the panels, varied within a method's colour
    styles = {key: LINESTYLES[(LINESTYLES.index(looks[key[1]][1]) + [k[1] for k in keys[:i]].count(key[1]))
                              % len(LINESTYLES)] for i, key in enumerate(keys)}
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
            color, _, lw = looks[algo]
            line, = ax.plot(mean.index, mean.values, color=color, ls=styles[key], lw=lw)
            ax.fill_between(mean.index, lo.values, hi.values, color=color, alpha=0.2, lw=0)
            first.setdefault(key, (line, *parts[key], wide.shape[1]))
        ax.set_yscale(scale)
        ax.yaxis.set_major_formatter(PERCENT)
        ax.yaxis.set_minor_formatter(PercentWhereLabelled(ax.yaxis.get_minor_formatter()))
        threshold_line(ax, thr)
        ax.set_xlabel("episode")
        ax.set_ylabel(f"{ylabel} (%)")
        ax.set_title(ylabel if len(panels) > 1 else "", fontsize=TITLE_PT)
        ax.grid(True, which="major", alpha=0.3)
    drawn = [first[key] for key in keys if key in first]
    ns = [n for *_, n in drawn]
    labels = labels or {}
    # one seed count for every line: the title says it; otherwise each label does
    for line, algo, p, n in drawn:
        text = label_text(labels.get(algo, method_label(algo)), p, None if len(set(ns)) == 1 else n)
        line.set_label(labels.get(text, text))
    handles = [d[0] for d in drawn]
    # the task's name, unless the title names its family ("MNIST bandit") already
    named = [] if items and items[0][0] == "task.impl" else [task]
    title = ", ".join([*named, *(text for _, text in items), *([se_text(ns)] if ns else [])])
    # at the title's size, broken between words where it is wider than the figure
    fig.suptitle(title, fontsize=TITLE_PT + 1)
    fit_figure_texts(fig)
    if handles:
        legend_below(fig, handles, [h.get_label() for h in handles],
                     ax=axes[0][0] if len(panels) == 1 else None)
    return fig


def plot_results(df: pd.DataFrame, out_dir, yscale: str = "auto", labels: dict | None = None,
                 all_configs: bool = False) -> list[Path]:
    """One figure per task, saved as PNG (300 dpi) and PDF; returns the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, t in df.groupby("task.name", sort=True):
        scale = yscale if yscale != "auto" else ("linear" if linear_by_default(task) else "log")
        fig = render_task(task, t if all_configs else one_config_per_line(t), scale, labels=labels)
        for ext in ("png", "pdf"):
            path = out_dir / f"{_filename(task)}.{ext}"
            # drawn at a paper column's size (text prints at size), saved >= MIN_PX wide
            io.save_figure(fig, path, dpi=png_dpi(fig))
            paths.append(path)
        plt.close(fig)
    return paths


def parse_labels(text: str | None) -> dict:
    """--labels: "tpo=TPO (ours),grpo=GRPO", or a YAML/JSON file of the same mapping."""
    if not text:
        return {}
    path = Path(text)
    if path.is_file():
        import yaml
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"--labels {text}: not a mapping of name to label")
        return {str(k): str(v) for k, v in data.items()}
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    bad = [item for item in pairs if len(item) != 2 or not item[0].strip()]
    if bad:
        raise ValueError(f"--labels {text!r}: expected NAME=LABEL[,NAME=LABEL...] or a YAML file")
    return {k.strip(): v.strip() for k, v in pairs}


def _cast(value: str, column: pd.Series):
    if pd.api.types.is_numeric_dtype(column):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{column.name} is numeric, got {value!r}") from None
    return value


# --where's short keys: the paper's (H, V, K, reward, target, epochs, ...) and the legends'
WHERE_KEYS = {v: k for k, v in SHORT.items()} | {k: v for k, v in ALIASES.items() if k != "algo"}


def where_notes(df: pd.DataFrame, where=()) -> tuple[pd.DataFrame, list[str]]:
    """H names the terminal-reward task's length, the paper's horizon: a --where on H
    that does not name the reward keeps the terminal-reward rows where the table has
    any, and says which other tasks of that length it left out."""
    keys = {WHERE_KEYS.get(c.partition("=")[0].strip(), c.partition("=")[0].strip()) for c in where}
    if "task.sequence_length" not in keys or "task.reward" in keys or "task.reward" not in df.columns:
        return df, []
    terminal = df["task.reward"] == "terminal"
    if not terminal.any() or terminal.all():
        return df, []
    other = sorted(df.loc[~terminal, "task.name"].dropna().unique())
    return df[terminal], [f"--where on H keeps the terminal-reward tasks; also of this length, left out: "
                          f"{', '.join(other)} (name the reward, e.g. --where reward=bag_of_tokens, to draw them)"]


def filter_rows(df: pd.DataFrame, methods=None, where=(), notes: list | None = None) -> pd.DataFrame:
    """--methods and --where: rows of these methods and settings. A key filters exactly
    the column it names (a short key: H, V, K, B, D, reward, target, epochs, eta, match,
    ...); H without reward keeps the terminal-reward tasks (where_notes; notes, given a
    list, gets what was left out). ValueError naming the key and the valid choices for a
    method or key the table does not have."""
    if methods:
        wanted = [m.strip() for m in ",".join(methods).split(",") if m.strip()]
        have = sorted(df["algo.name"].dropna().unique())
        unknown = [m for m in wanted if m not in have]
        if unknown:
            raise ValueError(f"--methods: {', '.join(unknown)} not in the table; valid: {', '.join(have)}")
        df = df[df["algo.name"].isin(wanted)]
    short = WHERE_KEYS  # "H" -> task.sequence_length, as legends print it
    for cond in where or ():
        key, sep, value = cond.partition("=")
        col = short.get(key.strip(), key.strip())
        if not sep or col not in df.columns:
            valid = sorted({*(k for k, c in short.items() if c in df.columns),
                            *(c for c in df.columns if c.startswith(("task.", "algo.", "optim.")) or c == "match")})
            raise ValueError(f"--where {cond!r}: unknown key {key.strip()!r}; valid: {', '.join(valid)}")
        values = [_cast(v.strip(), df[col]) for v in value.split(",")]
        df = df[df[col].isin(values)]
    df, said = where_notes(df, where or ())
    if notes is not None:
        notes += said
    return df


@os_errors_in_one_line
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=collect.DEFAULT_OUT, help="table from analysis/collect.py")
    parser.add_argument("--out", default=f"{collect.DEFAULT_ROOT}/plots", help="directory for the figures")
    parser.add_argument("--yscale", choices=["auto", "log", "linear"], default="auto")
    parser.add_argument("--methods", nargs="+", metavar="A,B", help="only these methods (algo names)")
    parser.add_argument("--where", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                        help="only rows with this setting (a column or a short key: H, K, V, reward, target, ...; "
                             "H without reward: the terminal-reward tasks); repeatable")
    parser.add_argument("--labels", default=None, metavar="MAP",
                        help="legend text per method: 'tpo=TPO (ours),grpo=GRPO' or a YAML file")
    parser.add_argument("--all-configs", action="store_true",
                        help="a line per configuration, even where a method's differ only in seeds")
    parser.add_argument("--figure", nargs="+", metavar="NAME",
                        help="draw these paper figures (see --list; 'all' for every one)")
    parser.add_argument("--add-runs", action="append", default=[], metavar="ROOT",
                        help="also the completed runs under this output root (repeatable); with "
                             "--figure, also its runs under way, drawn as far as they got")
    parser.add_argument("--no-committed-runs", action="store_true",
                        help="plotting the committed table: leave out the committed runs beside it "
                             "(read by default when no --add-runs is given)")
    parser.add_argument("--page", default=None, metavar="FILE",
                        help="with --figure all: write the comparison page (e.g. docs/figures.md)")
    parser.add_argument("--list", action="store_true", help="name the paper figures and exit")
    parser.add_argument("--split-code", action="store_true",
                        help="draw seeds of one config run under different code as separate lines")
    args = parser.parse_args(argv)

    if args.list:
        for name in paper_figures.ORDER:
            spec = paper_figures.PAPER[name]
            print(f"{name:<24} Figure {spec.number} in the paper's form ({len(spec.panels)} panel"
                  f"{'s' * (len(spec.panels) > 1)}){', with a companion' if spec.companion else ''}")
        for name in our_figures():
            spec = figures.FIGURES[name]
            print(f"{name:<24} {spec.title} ({len(spec.panels)} panel{'s' * (len(spec.panels) > 1)})")
        for name, module in OTHER_FIGURES.items():
            print(f"{name:<24} {module.TITLE} (not in 'all')")
        return 0
    known = [*paper_figures.ORDER, *figures.FIGURES, *OTHER_FIGURES]
    unknown = sorted(set(args.figure or ()) - set(known) - {"all"})
    if unknown:
        print(f"error: unknown figure(s) {', '.join(unknown)}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2
    if args.page and "all" not in (args.figure or ()):
        print("error: --page needs --figure all (the page shows every paper figure)", file=sys.stderr)
        return 2
    try:
        labels = parse_labels(args.labels)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for root in map(Path, args.add_runs):
        if not root.is_dir():
            print(f"error: --add-runs {root}: no such folder", file=sys.stderr)
            return 2

    df = read_results(args.results, "nothing to draw", split_code=args.split_code)
    if isinstance(df, int):  # missing, empty or not the collected table: nothing drawn
        return df
    found = [] if args.add_runs or args.no_committed_runs else committed_runs(args.results)
    if found:
        print(f"note: {args.results} is the committed table: also its runs under "
              f"{', '.join(map(str, found))} (--no-committed-runs leaves them out)", file=sys.stderr)
        args.add_runs = [str(r) for r in found]
    warn_if_stale(args.results, added=args.add_runs)
    for root in map(Path, args.add_runs):
        added, _ = collect.collect(root)
        if not added.empty:
            df, _ = collect.merge(df, added)
        if args.figure:  # a run under way is drawn, said so in its panel, never judged
            df = with_runs_under_way(df, collect.in_progress(root))
    if args.add_runs:
        df = collect.check_code(df, args.split_code)
        if df is None:
            return 1
    notes = []
    try:
        df = filter_rows(df, args.methods, args.where, notes)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if df.empty:
        print("error: no rows match --methods/--where; nothing drawn", file=sys.stderr)
        return 2
    diverged = collect.diverged_seeds(args.results)
    for (task, algo, h), g in df.groupby(GROUP, sort=True):
        if h in diverged:
            gone = diverged[h]
            print(f"note: {algo} on {task} (config {h}): {len(gone)} seed{'s' * (len(gone) > 1)} "
                  f"diverged ({', '.join(map(str, gone))}) and {'are' if len(gone) > 1 else 'is'} not "
                  f"in the table: its line is the {g['seed'].nunique()} that completed", file=sys.stderr)
    df.attrs["diverged"] = {h: len(s) for h, s in diverged.items()}
    refused = incomplete_groups(df)
    for why in refused.values():
        print(f"error: refused {why}", file=sys.stderr)
    if refused:
        df = df[~df.set_index(GROUP).index.isin(list(refused))]
        if df.empty:
            return 1
    if args.figure:
        if args.page:  # the page draws the paper's figures itself
            from .paper import page
            print(f"wrote {page.write(df, Path(args.page), Path(args.out))}")
        rc = draw_figures(df, args.figure, args.out, paper=not args.page)
        return rc or int(bool(refused))
    lines = df if args.all_configs else one_config_per_line(df)
    print(format_summary(relabel(summarise(lines), labels)))
    for path in plot_results(lines, args.out, args.yscale, labels, all_configs=True):
        print(f"wrote {path}")
    return 1 if refused else 0


# The committed runs the committed table leaves out (completed after it was collected),
# relative to the table's folder: what the documented commands pass as --add-runs.
COMMITTED_RUNS = ("runs/terminal", "runs/dense", "runs/mechanism", "runs/llm")
COMMITTED_TABLE = Path(__file__).resolve().parents[1] / "reproduction" / "results.parquet"


def committed_runs(results) -> list[Path]:
    """The committed run folders beside the committed table, when `results` is that
    table (reproduction/results.parquet of this checkout); [] for any other table."""
    path = Path(results)
    try:
        same = path.resolve() == COMMITTED_TABLE.resolve()
    except OSError:
        return []
    return [path.parent / r for r in COMMITTED_RUNS if (path.parent / r).is_dir()] if same else []


def with_runs_under_way(df: pd.DataFrame, under_way: pd.DataFrame) -> pd.DataFrame:
    """df and the rows of runs under way (collect.in_progress) that df does not hold
    completed (a run resumed after it completed is the completed one here)."""
    if under_way.empty:
        return df
    keys = ["config_hash", "seed"]
    have = pd.MultiIndex.from_frame(df[keys]) if not df.empty else pd.MultiIndex.from_tuples([], names=keys)
    new = under_way[~pd.MultiIndex.from_frame(under_way[keys]).isin(have)]
    return pd.concat([df, new], ignore_index=True) if not new.empty else df


def our_figures() -> list[str]:
    """Figures of ours beside the paper's (the stale-actor extension, the validation-split
    check, the K = 32 diagnostics), not the companions the paper's figures draw."""
    companions = {spec.companion for spec in paper_figures.PAPER.values()}
    return [n for n in figures.FIGURES if n not in paper_figures.PAPER and n not in companions]


def draw_figures(df: pd.DataFrame, names, out_dir, paper: bool = True) -> int:
    """Draw the named figures; exit status 1 if a named one (or, for 'all', every one)
    has no results. A paper figure is always drawn, its panels without runs saying so.
    paper=False: 'all' leaves the paper's figures out (the page drew them)."""
    every = "all" in names
    names = ([*paper_figures.ORDER] * paper + our_figures()) if every else list(dict.fromkeys(names))
    drawn, missing = 0, 0
    for name in names:
        other = OTHER_FIGURES.get(name)
        try:
            if other:
                paths = other.draw(df, out_dir)
            elif name in paper_figures.PAPER:
                paths = paper_figures.draw(name, df, out_dir)
            else:
                paths = figures.draw(name, df, out_dir, dpi=DPI)
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
