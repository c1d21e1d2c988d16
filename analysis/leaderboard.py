"""A leaderboard of methods across tasks, with the aggregate statistics of rliable (Agarwal
et al. 2021), computed here with rliable's definitions (tests/test_leaderboard.py holds
rliable's own numbers on three matrices):

    python analysis/leaderboard.py [--results FILE] [--out DIR] [--experiment NAME] ...

It writes DIR/leaderboard.png (and .pdf): the interquartile mean (iqm) with 95 % stratified
bootstrap intervals per method, the probability-of-improvement matrix and performance
profiles; and DIR/leaderboard.md (also printed): per method its IQM, P(improvement) over
GRPO and over TPO, mean rank, runs and tasks, then each task's mean final error per method.
A run's number is its final error (the mean `error` over its last LAST_FRAC of logged rows),
normalised per task (`normalise`); scores equal within RANK_TOL (relative) share a rank.
Every method needs runs of every task and one configuration per task and method.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis"
from .collect import DEFAULT_OUT, DEFAULT_ROOT, GROUP, last_step, read_results
from ..cli import spelled
from .configs import pick_config
from .style import COLUMN_IN, LEGEND_PT, SUPTITLE_PT, TITLE_PT, color_for, legend_below, look, plt, wrap
from ..contract import io

IQM_CUT = 0.25  # trimmed from each end: the interquartile mean
LAST_FRAC = 0.1
RANK_TOL = 1e-9  # relative: mean scores this close share a rank (float rounding, not a ranking)
N_RESAMPLES = 10_000
BOOT_SEED = 0
LEVEL = 0.95
TAUS = np.linspace(0.0, 1.0, 101)
REFERENCES = ("grpo", "tpo")  # the methods everyone's probability of improvement is against
NAME = "leaderboard"
TITLE = "Leaderboard across tasks: IQM, probability of improvement, performance profiles"
NORMALISATIONS = ("initial", "one_minus_error", "minmax")
TASK, METHOD = "task", "method"  # the tidy frame's columns (with seed, final_error, score)


class NoData(Exception):
    """Nothing to rank; the message says what is missing and what to run or pass."""


# ---------------------------------------------------------------- statistics on arrays


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap interval."""
    point: float
    lo: float
    hi: float


def trim_mean(x, proportion: float) -> float:
    """Mean of x (flattened) without the floor(proportion * n) smallest and as many largest
    values, n = x.size: scipy.stats.trim_mean(x, proportion, axis=None)."""
    v = np.sort(np.asarray(x, dtype=float).ravel())
    if v.size == 0:
        raise ValueError("trim_mean of no values")
    if not 0 <= proportion < 0.5:
        raise ValueError(f"proportion must be in [0, 0.5), got {proportion}")
    cut = int(proportion * v.size)
    return float(v[cut:v.size - cut].mean())


def iqm(x) -> float:
    """Interquartile mean: trim_mean(x, 0.25) over every value of x (rliable's
    aggregate_iqm on a runs x tasks matrix: scipy.stats.trim_mean(scores, 0.25, axis=None))."""
    return trim_mean(x, IQM_CUT)


def resample_counts(sizes: Sequence[int], reps: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The stratified bootstrap: per task (stratum) of n_t runs, a (reps, n_t) array of how
    often each run is drawn when n_t runs are drawn from that task's own runs with
    replacement (multinomial counts), tasks independent. Every resample keeps each task's
    number of runs: no task can lose its runs to another."""
    return [rng.multinomial(n, np.full(n, 1.0 / n), size=reps) for n in sizes]


def trim_mean_counts(values: np.ndarray, counts: np.ndarray, proportion: float) -> np.ndarray:
    """trim_mean of each resample, a resample given as counts (reps, N) of the N values
    (each row summing to N): the sorted multiset's positions cut..N-cut, weighted."""
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[:, order]
    n = values.size
    cut = int(proportion * n)
    upper_edge = np.cumsum(c, axis=1)  # a value's copies fill positions [edge - c, edge)
    lower_edge = upper_edge - c
    kept = np.clip(np.minimum(upper_edge, n - cut) - np.maximum(lower_edge, cut), 0, None)
    return (kept * v).sum(axis=1) / (n - 2 * cut)


def _percentile(boot: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    a = (1 - level) / 2
    lo, hi = np.quantile(boot, [a, 1 - a], axis=0)
    return lo, hi


def _tasks(per_task) -> list[np.ndarray]:
    out = [np.asarray(t, dtype=float).ravel() for t in per_task]
    if not out or any(t.size == 0 for t in out):
        raise ValueError("every task needs at least one run")
    return out


def iqm_ci(per_task, reps: int = N_RESAMPLES, seed: int = BOOT_SEED,
           level: float = LEVEL) -> Interval:
    """IQM of one method's runs of every task pooled (per_task: one array of run scores per
    task), with the percentile interval of `reps` stratified bootstrap resamples (runs
    resampled within each task, tasks independently); numpy Generator(seed)."""
    tasks = _tasks(per_task)
    values = np.concatenate(tasks)
    counts = np.concatenate(resample_counts([t.size for t in tasks], reps,
                                            np.random.default_rng(seed)), axis=1)
    lo, hi = _percentile(trim_mean_counts(values, counts, IQM_CUT), level)
    return Interval(iqm(values), float(lo), float(hi))


def _wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """w[i, j] = 1 if x_i > y_j, 1/2 if x_i == y_j, 0 otherwise."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def task_improvement(x, y) -> float:
    """P(X > Y) on one task: the chance that a run of X drawn at random scores above a run
    of Y drawn at random, ties counting 1/2: the Mann-Whitney U statistic of X over Y
    divided by n_x * n_y."""
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    return float(_wins(x, y).mean())


def probability_of_improvement(x_tasks, y_tasks) -> float:
    """rliable's probability of improvement of X over Y: the per-task P(X > Y) (ties 1/2)
    averaged over tasks, each task weighing the same. P(X > X) = 1/2."""
    xs, ys = _tasks(x_tasks), _tasks(y_tasks)
    if len(xs) != len(ys):
        raise ValueError(f"X has {len(xs)} tasks, Y {len(ys)}")
    return float(np.mean([task_improvement(x, y) for x, y in zip(xs, ys)]))


def poi_ci(x_tasks, y_tasks, paired=False, reps: int = N_RESAMPLES, seed: int = BOOT_SEED,
           level: float = LEVEL) -> Interval:
    """probability_of_improvement with a stratified bootstrap interval: within each task
    X's runs and Y's runs are resampled, independently of each other (rliable's
    StratifiedIndependentBootstrap; the leaderboard's choice). paired (one bool, or one per
    task; equal run counts there, aligned by seed) draws the same seeds for both instead:
    seed s starts every method from the same weights and prompts."""
    xs, ys = _tasks(x_tasks), _tasks(y_tasks)
    if len(xs) != len(ys):
        raise ValueError(f"X has {len(xs)} tasks, Y {len(ys)}")
    pairs = [bool(paired)] * len(xs) if np.ndim(paired) == 0 else [bool(p) for p in paired]
    rng = np.random.default_rng(seed)
    boot = np.zeros(reps)
    for x, y, pair in zip(xs, ys, pairs):
        if pair and x.size != y.size:
            raise ValueError(f"paired tasks need as many runs of X as of Y ({x.size} vs {y.size})")
        [cx] = resample_counts([x.size], reps, rng)
        [cy] = [cx] if pair else resample_counts([y.size], reps, rng)
        boot += ((cx @ _wins(x, y)) * cy).sum(axis=1) / (x.size * y.size)
    lo, hi = _percentile(boot / len(xs), level)
    return Interval(probability_of_improvement(xs, ys), float(lo), float(hi))


def performance_profile(per_task, taus=TAUS) -> np.ndarray:
    """Run-score distribution (rliable's performance profile): for each tau, the fraction
    of all runs of every task pooled whose score is strictly above tau."""
    values = np.concatenate(_tasks(per_task))
    return (values[:, None] > np.asarray(taus, dtype=float)[None, :]).mean(axis=0)


def profile_ci(per_task, taus=TAUS, reps: int = N_RESAMPLES, seed: int = BOOT_SEED,
               level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """performance_profile and its pointwise stratified bootstrap band (lo, hi per tau)."""
    tasks = _tasks(per_task)
    values = np.concatenate(tasks)
    counts = np.concatenate(resample_counts([t.size for t in tasks], reps,
                                            np.random.default_rng(seed)), axis=1)
    above = values[:, None] > np.asarray(taus, dtype=float)[None, :]
    lo, hi = _percentile(counts @ above / values.size, level)
    return performance_profile(tasks, taus), lo, hi


def _tied(a: float, b: float, tol: float = RANK_TOL) -> bool:
    return a == b or abs(a - b) <= tol * max(abs(a), abs(b))


def task_ranks(means: pd.DataFrame, tol: float = RANK_TOL) -> pd.DataFrame:
    """Per task (row) the rank of each method (column) by its mean score: 1 for the
    highest, tied methods sharing the mean of the ranks they span (1.5, 1.5, 3). Tied:
    equal within tol, relative (neighbours in sorted order, chained): two methods that
    compute one update reach one score up to float rounding, and rounding is no ranking."""
    out = pd.DataFrame(np.nan, index=means.index, columns=means.columns)
    for task, row in means.iterrows():
        v = row.dropna().sort_values(ascending=False, kind="stable")
        ranks, start = np.arange(1.0, len(v) + 1), 0
        for i in range(1, len(v) + 1):
            if i == len(v) or not _tied(v.iloc[i - 1], v.iloc[i], tol):
                ranks[start:i] = ranks[start:i].mean()
                start = i
        out.loc[task, v.index] = ranks
    return out


# ---------------------------------------------------------------- from the collected table


class Refused(ValueError):
    """A table the leaderboard cannot rank as asked (bad input: exit 2)."""


def final_errors(df: pd.DataFrame, last_frac: float = LAST_FRAC, column: str = "error") -> pd.DataFrame:
    """One row per run (task.name, algo.name, config_hash, seed): `final_error`, the mean
    of `column` over its last ceil(last_frac * n) logged rows (n its rows with a value; at
    least one), `initial_error` at its first logged row, `first_step` (that row's step), and
    `rollouts`, the cumulative count at its last row (NaN if the table has none)."""
    if not 0 <= last_frac <= 1:
        raise Refused(f"--last-frac must be in [0, 1], got {last_frac}")
    run = [*GROUP, "seed"]
    d = df.dropna(subset=[column]).drop_duplicates([*run, "step"], keep="last")
    d = d.sort_values([*run, "step"], kind="stable")
    g = d.groupby(run, sort=True)
    n = g[column].transform("size")
    keep = np.maximum(1, np.ceil(last_frac * n - 1e-9))
    last = d[g.cumcount(ascending=False) < keep]
    out = pd.DataFrame({
        "final_error": last.groupby(run, sort=True)[column].mean(),
        "initial_error": g[column].first(),
        "first_step": g["step"].first(),
        # cumulative: the run's whole sampling cost (DAPO's top-ups included)
        "rollouts": g["rollouts"].last() if "rollouts" in d.columns else np.nan,
    }).reset_index()
    return out.rename(columns={"task.name": TASK, "algo.name": METHOD})


def normalise(runs: pd.DataFrame, how: str = "initial") -> pd.DataFrame:
    """runs (from final_errors) with a `score` column, per task. Each normalisation is, per
    task, a decreasing affine map of the final error e, so ranks and P(improvement) do not
    depend on it: `initial` (default) 1 - e / e0, e0 the task's mean untrained error at
    step 0 (0 = the untrained policy, 1 = no error: rliable's human-normalised recipe with
    the untrained policy as random play; `1 - e` alone would give a dense V = 2 task half
    its range for free); `one_minus_error` 1 - e; `minmax` (e_max - e) / (e_max - e_min)
    over the compared runs (relative to the field; 1 where all agree)."""
    if how not in NORMALISATIONS:
        raise Refused(f"unknown normalisation {how!r}; known: {', '.join(NORMALISATIONS)}")
    e = runs["final_error"]
    by_task = runs.groupby(TASK)
    if how == "one_minus_error":
        score = 1 - e
    elif how == "initial":
        late = runs.loc[runs["first_step"] != 0, TASK].unique()
        if len(late):
            raise Refused(f"--normalise initial needs every run's step 0 (the untrained error); "
                          f"task(s) {', '.join(map(str, late))} have runs without it: use "
                          f"--normalise one_minus_error")
        e0 = by_task["initial_error"].transform("mean")
        if (e0 <= 0).any():
            bad = runs.loc[e0 <= 0, TASK].unique()
            raise Refused(f"task(s) {', '.join(map(str, bad))} start at error 0: nothing to "
                          f"normalise by; use --normalise one_minus_error")
        score = 1 - e / e0
    else:
        hi, lo = by_task["final_error"].transform("max"), by_task["final_error"].transform("min")
        span = hi - lo
        score = ((hi - e) / span.where(span > 0)).fillna(1.0)
    return runs.assign(score=score.astype(float))


def one_config_per_cell(df: pd.DataFrame, pick: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """The rows of one config hash per (task, method); several: Refused naming them, or,
    with pick, analysis.configs.pick_config's choice (most seeds, then longest) and a note."""
    notes, keep, clash = [], [], []
    for (task, algo), g in df.groupby(["task.name", "algo.name"], sort=True):
        if g["config_hash"].nunique() == 1:
            keep.append(g)
            continue
        per = g.groupby("config_hash").agg(seeds=("seed", "nunique"), last=("step", "max"))
        keys = [c for c in g.columns if c.startswith(("task.", "algo.", "optim."))
                or c in ("match", "experiment")]
        first = g.groupby("config_hash")[keys].first()
        differ = [c for c in keys if first[c].astype(str).nunique() > 1]
        text = "; ".join(f"{h}: {r.seeds} seeds to step {r.last}"
                         + "".join(f", {c}={first.loc[h, c]}" for c in differ)
                         for h, r in per.iterrows())
        if pick:
            chosen = pick_config(g)
            keep.append(chosen)
            notes.append(f"note: {algo} on {task}: took config {chosen['config_hash'].iloc[0]} of "
                         f"{len(per)} ({text})")
        else:
            clash.append(f"  {algo} on {task}: {len(per)} configurations ({text})")
    if clash:
        raise Refused("several configurations of one method on one task (a leaderboard never "
                      "pools them):\n" + "\n".join(clash) + "\n  choose with --where (e.g. "
                      "algo.epochs=1), --experiment, --tasks/--methods, a table of one study "
                      "(collect its own output root), or --pick-config (the one with the most seeds)")
    return pd.concat(keep, ignore_index=True), notes


def incomplete_runs(df: pd.DataFrame) -> pd.DataFrame:
    """(task.name, algo.name, config_hash, seed) of runs without their config's last step
    (task.episodes, and task.eval_every where set): an earlier step is not a final error."""
    if "task.episodes" not in df.columns:
        return pd.DataFrame(columns=[*GROUP, "seed", "last"])
    cols = [*GROUP, "seed"]
    every = df["task.eval_every"] if "task.eval_every" in df.columns else pd.Series(np.nan, index=df.index)
    per = df.assign(_every=every).groupby(cols, sort=True).agg(
        steps=("step", "max"), episodes=("task.episodes", "first"), every=("_every", "first"))
    per = per[per["episodes"].notna()]
    last = [last_step(int(r.episodes), int(r.every) if pd.notna(r.every) and r.every > 0 else None)
            for r in per.itertuples()]
    per = per.assign(last=last)
    return per[per["steps"] < per["last"]].reset_index()[[*cols, "last"]]


def parse_where(items) -> dict:
    """["match=prompts", "algo.k=8"] -> {"match": "prompts", "algo.k": 8}: numbers where
    they parse as numbers. A row passes where its column has the value or none (NaN: a
    knob its method does not have, as analysis/paper/experiments.py filters)."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise Refused(f"--where wants COLUMN=VALUE, got {item!r}")
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def scores_from_table(df: pd.DataFrame, normalisation: str = "initial", last_frac: float = LAST_FRAC,
                      experiment: str | None = None, tasks=None, methods=None,
                      pick: bool = False, where: dict | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The tidy frame of one score per run (task, method, config_hash, seed, final_error,
    initial_error, first_step, score) from the collected table, and notes to print: the
    selection (experiment label, tasks, methods, column values), one config per cell,
    complete runs only."""
    notes = []
    for col, value in (where or {}).items():
        if col not in df.columns:
            raise Refused(f"--where {col}=...: the table has no column {col}")
        df = df[df[col].isna() | (df[col] == value)]  # NaN: a knob the method has not
    if experiment is not None:
        if "experiment" not in df.columns:
            raise Refused(f"--experiment {experiment}: the table has no experiment column")
        df = df[df["experiment"] == experiment]
    for col, wanted, flag in (("task.name", tasks, "--tasks"), ("algo.name", methods, "--methods")):
        if wanted:
            unknown = sorted(set(wanted) - set(df[col].dropna()))
            if unknown:
                raise Refused(f"{flag}: {', '.join(unknown)} not in the table (it has "
                              f"{', '.join(sorted(map(str, df[col].dropna().unique()))) or 'none'})")
            df = df[df[col].isin(wanted)]
    if df.empty:
        raise NoData("no runs to rank" + (f" labelled experiment={experiment}: run "
                                          f"`python -m bench -m +experiment={experiment}`, then "
                                          f"`{spelled('collect')}`" if experiment else ""))
    df, picked = one_config_per_cell(df, pick)
    notes += picked
    short = incomplete_runs(df)
    if len(short):
        for r in short.itertuples(index=False):
            notes.append(f"error: refused {r[1]} on {r[0]} (config {r[2]}) seed {r[3]}: it lacks the "
                         f"last step {r[4]}; an earlier step is not its final error")
        bad = pd.MultiIndex.from_frame(short[[*GROUP, "seed"]])
        df = df[~df.set_index([*GROUP, "seed"]).index.isin(bad)]
        if df.empty:
            raise NoData("no complete runs to rank")
    runs = normalise(final_errors(df, last_frac), normalisation)
    cells = runs.groupby([TASK, METHOD]).size().unstack()
    missing = [f"{m} on {t}" for t in cells.index for m in cells.columns if pd.isna(cells.loc[t, m])]
    if missing:
        raise Refused(f"every method needs runs of every task; missing: {', '.join(missing)} "
                      f"(restrict with --tasks/--methods)")
    return runs, notes


@dataclass
class Board:
    """Everything the figure and the table show."""
    # per method (index), best IQM first: iqm, iqm_lo, iqm_hi, p_<ref>, p_<ref>_lo,
    # p_<ref>_hi (each reference present), mean_rank, runs, tasks, rollouts_rel (NaN
    # without a rollouts column)
    table: pd.DataFrame
    poi: pd.DataFrame  # P(row > column), methods in the table's order
    profiles: dict  # method -> (point, lo, hi) over taus
    taus: np.ndarray
    ranks: pd.DataFrame  # task x method
    task_error: pd.DataFrame  # task x method: mean final error over seeds
    task_se: pd.DataFrame  # ... its SE (ddof 0, as the project's)
    seeds: pd.DataFrame  # task x method: runs
    initial: pd.Series  # task: mean error at the runs' first logged step (step 0: untrained)
    settings: dict = field(default_factory=dict)


def _per_task(runs: pd.DataFrame, method: str, tasks) -> list[np.ndarray]:
    """The method's run scores per task, in the given task order, by seed."""
    mine = runs[runs[METHOD] == method].sort_values([TASK, "seed"])
    by = dict(list(mine.groupby(TASK)))
    return [by[t]["score"].to_numpy(float) for t in tasks]


def build_board(runs: pd.DataFrame, references=REFERENCES, reps: int = N_RESAMPLES,
                seed: int = BOOT_SEED, level: float = LEVEL, taus=TAUS, **settings) -> Board:
    """The leaderboard of a tidy score frame (every method on every task). Each statistic
    draws its own Generator(seed), so a method's numbers do not depend on the others."""
    tasks = sorted(runs[TASK].unique())
    methods = sorted(runs[METHOD].unique())
    scores = {m: _per_task(runs, m, tasks) for m in methods}
    means = runs.groupby([TASK, METHOD])["score"].mean().unstack()[methods]
    ranks = task_ranks(means)
    # A board at equal episodes is not one at equal samples: PG and PPO draw 1 answer per
    # prompt where the grouped methods draw K, and DAPO tops its batch up. Per task, a
    # method's mean rollouts over the task's median method's, averaged over tasks.
    spent = runs.groupby([TASK, METHOD])["rollouts"].mean().unstack()[methods]
    rollouts_rel = spent.div(spent.median(axis=1), axis=0).mean(axis=0)
    rows = {}
    for m in methods:
        ci = iqm_ci(scores[m], reps, seed, level)
        rows[m] = {"iqm": ci.point, "iqm_lo": ci.lo, "iqm_hi": ci.hi,
                   "mean_rank": float(ranks[m].mean()), "runs": int(sum(map(len, scores[m]))),
                   "tasks": len(tasks), "rollouts_rel": float(rollouts_rel[m])}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table = table.sort_values(["iqm", "mean_rank"], ascending=[False, True], kind="stable")
    order = list(table.index)

    def poi(x, y):
        return poi_ci(scores[x], scores[y], False, reps, seed, level)

    for ref in references:
        if ref not in scores:
            continue
        cis = {m: poi(m, ref) if m != ref else Interval(0.5, math.nan, math.nan) for m in order}
        for suffix, attr in (("", "point"), ("_lo", "lo"), ("_hi", "hi")):
            table[f"p_{ref}{suffix}"] = [getattr(cis[m], attr) for m in order]
    matrix = pd.DataFrame([[probability_of_improvement(scores[x], scores[y]) for y in order]
                           for x in order], index=order, columns=order)
    taus = np.asarray(taus, dtype=float)
    profiles = {m: profile_ci(scores[m], taus, reps, seed, level) for m in order}
    err = runs.groupby([TASK, METHOD])["final_error"]
    n = err.size().unstack()[order]
    se = (err.std(ddof=0).unstack()[order] / np.sqrt(n))
    initial = runs.groupby(TASK)["initial_error"].mean()
    return Board(table, matrix, profiles, taus, ranks[order], err.mean().unstack()[order], se, n, initial,
                 {"reps": reps, "seed": seed, "level": level, "references": tuple(references),
                  "tasks": tasks, **settings})


# ---------------------------------------------------------------- the table and the figure

SCORE_TEXT = {
    "initial": "1 − final error / the task's error at step 0 (0 = the untrained policy, 1 = no error)",
    "one_minus_error": "1 − final error",
    "minmax": "(worst − final error) / (worst − best), over the task's compared runs",
}


def _ci(point, lo, hi, digits=3) -> str:
    if pd.isna(lo):
        return "—"
    return f"{point:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def describe(board: Board) -> str:
    s = board.settings
    pct = f"{s.get('last_frac', LAST_FRAC) * 100:g} %"
    level = f"{s['level'] * 100:g} %"
    seeds = sorted({int(n) for n in board.seeds.to_numpy().ravel()})
    seed_text = (f"{seeds[0]} seed{'s' * (seeds[0] != 1)} each" if len(seeds) == 1
                 else f"{seeds[0]}–{seeds[-1]} seeds per method and task")
    return (f"{len(board.table)} methods × {len(s['tasks'])} tasks ({', '.join(s['tasks'])}), "
            f"{seed_text}. Score: {SCORE_TEXT[s.get('normalisation', 'initial')]}; final error = "
            f"mean error over the last {pct} of a run's logged steps. IQM: interquartile mean "
            f"(25 % trimmed from each end) over every run of every task; [{level} CI]: "
            f"percentile interval of a stratified bootstrap ({s['reps']:,} resamples of the "
            f"runs within each task, seed {s['seed']}). P(X > Y): the probability that a run of "
            f"X scores above a run of Y on the same task (ties count 1/2), averaged over tasks "
            f"(X's and Y's runs resampled independently). Mean rank: over tasks, of the "
            f"method's rank by mean score (1 = best; ties, equal within {RANK_TOL:g} relative, share "
            f"the mean rank).")


def markdown(board: Board) -> str:
    """The leaderboard table, then each task's mean final error (%) ± SE and rank."""
    t = board.table
    refs = [r for r in board.settings["references"] if f"p_{r}" in t.columns]
    level = f"{board.settings['level'] * 100:g} %"
    spent = bool(t["rollouts_rel"].notna().all())
    head = ["method", f"IQM [{level} CI]", *(f"P(> {r}) [{level} CI]" for r in refs),
            "mean rank", "runs", "tasks", *(["rollouts (× median)"] * spent)]
    lines = [f"**Leaderboard.** {describe(board)}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, r in t.iterrows():
        cells = [m, _ci(r.iqm, r.iqm_lo, r.iqm_hi),
                 *(_ci(r[f"p_{ref}"], r[f"p_{ref}_lo"], r[f"p_{ref}_hi"], 2) for ref in refs),
                 f"{r.mean_rank:.2f}", str(int(r.runs)), str(int(r.tasks)),
                 *([f"{r.rollouts_rel:.2f}"] * spent)]
        lines.append("| " + " | ".join(cells) + " |")
    if spent:
        lines += ["", "Rollouts (× median): per task, the method's mean rollouts per run over "
                      "the median method's, averaged over tasks: the board compares methods at "
                      "equal episodes (prompt-matched), not at equal samples. A rollout is one "
                      "sampled answer: token-level methods sample one trajectory per prompt "
                      "(and score K next-token candidates along it), so they count one."]
    methods = list(t.index)
    pct = f"{board.settings.get('last_frac', LAST_FRAC) * 100:g} %"
    lines += ["", "Per task: the untrained error (mean over runs at step 0) and each method's mean "
                  f"final error (a run's mean error over its last {pct} of logged steps), % ± SE "
                  f"over seeds (rank by mean score; scores within {RANK_TOL:g}, relative, share a "
                  "rank).", "",
              "| task | step 0 | " + " | ".join(methods) + " |", "|" + "---|" * (len(methods) + 2)]
    for task in board.task_error.index:
        cells = [f"{board.initial.loc[task] * 100:.2f}"]
        for m in methods:
            e, se, n = board.task_error.loc[task, m], board.task_se.loc[task, m], board.seeds.loc[task, m]
            spread = f" ± {se * 100:.2f}" if n > 1 else ""
            cells.append(f"{e * 100:.2f}{spread} ({board.ranks.loc[task, m]:g})")
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(board: Board):
    """Three panels: IQM with its interval per method (best on top); P(row > column); the
    performance profiles with their bootstrap bands."""
    order = list(board.table.index)
    k = len(order)
    width_poi = max(COLUMN_IN, 0.32 * k + 1.2)
    fig, (ax_iqm, ax_poi, ax_prof) = plt.subplots(
        1, 3, figsize=(2 * COLUMN_IN + width_poi, max(2.6, 0.25 * k + 1.4)), layout="constrained",
        gridspec_kw={"width_ratios": [COLUMN_IN, width_poi, COLUMN_IN]})
    t = board.table
    level = f"{board.settings['level'] * 100:g} %"
    for i, m in enumerate(order):
        y = k - 1 - i
        r = t.loc[m]
        ax_iqm.errorbar([r.iqm], [y], xerr=[[r.iqm - r.iqm_lo], [r.iqm_hi - r.iqm]], fmt=look(m).marker,
                        color=color_for(m), ms=4, capsize=3, lw=1.5)
    ax_iqm.set_yticks(range(k), order[::-1], fontsize=LEGEND_PT)
    ax_iqm.set(xlabel="IQM of normalised score", title=f"IQM, {level} stratified-bootstrap CI")
    ax_iqm.set_ylim(-0.6, k - 0.4)
    ax_iqm.grid(True, axis="x", alpha=0.3)

    m = board.poi.to_numpy()
    im = ax_poi.imshow(m, vmin=0, vmax=1, cmap="RdBu", aspect="auto")
    for i in range(k):
        for j in range(k):
            ax_poi.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=LEGEND_PT - 1,
                        color="white" if abs(m[i, j] - 0.5) > 0.3 else "black")
    ax_poi.set_xticks(range(k), order, rotation=45, ha="right", fontsize=LEGEND_PT)
    ax_poi.set_yticks(range(k), order, fontsize=LEGEND_PT)
    ax_poi.set(title="P(row > column), mean over tasks", xlabel="Y", ylabel="X")
    fig.colorbar(im, ax=ax_poi, shrink=0.8).ax.tick_params(labelsize=LEGEND_PT)

    handles = []
    for name in order:
        point, lo, hi = board.profiles[name]
        line, = ax_prof.plot(board.taus, point, color=color_for(name), lw=1.3, label=name)
        ax_prof.fill_between(board.taus, lo, hi, color=color_for(name), alpha=0.2, lw=0)
        handles.append(line)
    ax_prof.set(xlabel="normalised score τ", ylabel="fraction of runs > τ",
                title=f"performance profiles, {level} bands", ylim=(-0.02, 1.02))
    ax_prof.grid(True, alpha=0.3)
    for ax in (ax_iqm, ax_poi, ax_prof):
        ax.title.set_fontsize(TITLE_PT)
        for label in (ax.xaxis.label, ax.yaxis.label):
            label.set_fontsize(TITLE_PT)
        ax.tick_params(labelsize=LEGEND_PT)
    s = board.settings
    seeds = sorted({int(n) for n in board.seeds.to_numpy().ravel()})
    caption = [f"{k} methods × {len(s['tasks'])} tasks: {', '.join(s['tasks'])}",
               f"{seeds[0]} seed{'s' * (seeds[0] != 1)} each" if len(seeds) == 1
               else f"{seeds[0]}–{seeds[-1]} seeds",
               f"score: {SCORE_TEXT[s.get('normalisation', 'initial')]}",
               f"final error: mean over the last {s.get('last_frac', LAST_FRAC) * 100:g} % of steps"]
    fig.suptitle("\n".join(["Leaderboard", wrap(caption, fig.get_size_inches()[0], SUPTITLE_PT)]),
                 fontsize=SUPTITLE_PT)
    legend_below(fig, handles, [h.get_label() for h in handles])
    return fig


def write(board: Board, out_dir, dpi: int = 150) -> list[Path]:
    """DIR/leaderboard.png, .pdf (no creation date: redrawn, it changes only with the data)
    and .md; returns the paths, PNG first."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = render(board)
    paths = []
    for ext in ("png", "pdf"):
        paths.append(out_dir / f"{NAME}.{ext}")
        io.save_figure(fig, paths[-1], dpi=dpi, metadata={"CreationDate": None} if ext == "pdf" else None)
    plt.close(fig)
    paths.append(out_dir / f"{NAME}.md")
    io.write_text(paths[-1], markdown(board))
    return paths


def board_from_table(df: pd.DataFrame, normalisation: str = "initial", last_frac: float = LAST_FRAC,
                     experiment=None, tasks=None, methods=None, pick: bool = False,
                     reps: int = N_RESAMPLES, seed: int = BOOT_SEED, where=None, say=None) -> Board:
    runs, notes = scores_from_table(df, normalisation, last_frac, experiment, tasks, methods, pick, where)
    for note in notes:
        (say or (lambda text: print(text, file=sys.stderr)))(note)
    board = build_board(runs, reps=reps, seed=seed, normalisation=normalisation, last_frac=last_frac)
    board.settings["refused"] = sum(n.startswith("error:") for n in notes)
    return board


def draw(df: pd.DataFrame, out_dir, **options) -> list[Path]:
    """For `analysis/plot.py --figure leaderboard`: the default leaderboard of the table
    (every task and method in it); NoData if there is nothing to rank or it cannot be."""
    try:
        return write(board_from_table(df, **options), out_dir)
    except Refused as e:
        raise NoData(f"leaderboard: {e}") from e


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=f"{TITLE} (rliable's statistics; see analysis/leaderboard.py's docstring).")
    parser.add_argument("--results", default=DEFAULT_OUT, help="table from analysis/collect.py")
    parser.add_argument("--out", default=f"{DEFAULT_ROOT}/leaderboard", help="directory for leaderboard.{png,pdf,md}")
    parser.add_argument("--experiment", help="only rows with this experiment label (e.g. leaderboard)")
    parser.add_argument("--tasks", nargs="+", metavar="TASK", help="only these task.name values")
    parser.add_argument("--methods", nargs="+", metavar="ALGO", help="only these algo.name values")
    parser.add_argument("--where", nargs="+", metavar="COLUMN=VALUE",
                        help="only rows with these column values or none there (e.g. match=prompts)")
    parser.add_argument("--normalise", choices=NORMALISATIONS, default="initial",
                        help="per-task score (default: %(default)s; see the module docstring)")
    parser.add_argument("--last-frac", type=float, default=LAST_FRAC,
                        help="final error = mean over this fraction of a run's last rows (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=N_RESAMPLES, help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=BOOT_SEED, help="bootstrap seed (default: %(default)s)")
    parser.add_argument("--pick-config", action="store_true",
                        help="where a method has several configs on a task, take the one with the most seeds")
    args = parser.parse_args(argv)
    if args.reps < 1:
        print(f"error: --reps must be positive, got {args.reps}", file=sys.stderr)
        return 2

    df = read_results(args.results, "nothing to rank")
    if isinstance(df, int):
        return df
    try:
        board = board_from_table(df, args.normalise, args.last_frac, args.experiment, args.tasks,
                                 args.methods, args.pick_config, args.reps, args.seed,
                                 parse_where(args.where))
    except (Refused, NoData) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = write(board, args.out)
    print(markdown(board), end="")
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return 1 if board.settings["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
