"""Statistics over seeds: what the paper computes (science §The paper's numbers) and what a reviewer also wants.

Paper: final error = seed mean at the last step, SE = std(ddof=0) / sqrt(n), steps to a
threshold = first step where the *seed-mean* curve is below it. Added here: a percentile
bootstrap interval over seeds (seeded, so reports are reproducible) and steps-to-threshold
per seed with censoring (seeds that never got there are counted, never given a step).
All functions are pure: tables in, numbers out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

THRESHOLD = 0.01
N_RESAMPLES = 10_000
BOOT_SEED = 0
LEVEL = 0.95


def seed_curves(g: pd.DataFrame, y: str = "error", common: bool = True) -> pd.DataFrame:
    """step x seed matrix of column y. With common=True only the steps every seed logged,
    so the mean at each step averages the same seeds (no jumps where a seed's log ends)."""
    g = g.dropna(subset=[y]).drop_duplicates(["seed", "step"], keep="last")
    wide = g.pivot(index="step", columns="seed", values=y).sort_index()
    return wide.dropna() if common else wide


def mean_se(wide: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Seed mean and SE per step (SE with ddof=0, as the paper)."""
    n = wide.shape[1]
    return wide.mean(axis=1), wide.std(axis=1, ddof=0) / np.sqrt(n)


def standard_error(values) -> float:
    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=0) / np.sqrt(len(v))) if len(v) else float("nan")


def moving_average(x, window: int):
    """Trailing mean over the last `window` steps (fewer at the start), per column of a
    step x seed table. Smoothing each seed before averaging leaves the mean as if smoothed
    afterwards (it is linear) and gives the band of the smoothed curves."""
    x = x if isinstance(x, (pd.Series, pd.DataFrame)) else pd.Series(x, dtype=float)
    return x if window <= 1 else x.rolling(window, min_periods=1).mean()


def bootstrap_ci(values, level: float = LEVEL, n_resamples: int = N_RESAMPLES,
                 seed: int = BOOT_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over seeds; deterministic for a seed."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_resamples, len(v)))].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))



@lru_cache(maxsize=None)
def t_quantile(q: float, df: int) -> float:
    """Quantile of Student's t with df degrees of freedom, 0.5 <= q < 1: the density's
    integral from 0 (trapezoids on a fine grid, far enough out for df = 1) solved for
    q - 0.5. Written here because the project does not depend on scipy."""
    if not 0.5 <= q < 1 or df < 1:
        raise ValueError(f"need 0.5 <= q < 1 and df >= 1, got q={q}, df={df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    x = np.linspace(0.0, 1000.0, 2_000_001)
    density = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    area = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(x))])
    return float(np.interp(q - 0.5, area, x))


def t_interval(values, level: float = 0.90) -> tuple[float, float]:
    """Two-sided Student-t interval of the mean over seeds (s with ddof = 1); a single
    seed has no spread to measure: (-inf, inf)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return -math.inf, math.inf
    half = t_quantile(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return float(v.mean() - half), float(v.mean() + half)


SOLVED_PCT = 1.0  # a terminal-reward seed either solves the task or stalls far above this


def n_below(values, threshold: float = SOLVED_PCT) -> int:
    """How many seeds end strictly below threshold: a bimodal outcome is a count, not a mean."""
    return int(sum(float(v) < threshold for v in values))


def rank_sum_test(a, b, n_permutations: int = 20_000, seed: int = BOOT_SEED) -> float:
    """Two-sided permutation p-value of the Mann-Whitney rank-sum statistic (mid-ranks for
    ties, which a 0 %-or-100 % outcome has many of): how often relabelling the pooled
    seeds moves a's rank sum at least as far from its null mean as observed."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled = np.concatenate([a, b])
    order = pooled.argsort(kind="stable")
    ranks = np.empty(len(pooled))
    ranks[order] = np.arange(1, len(pooled) + 1)
    for v in np.unique(pooled):  # mid-ranks
        ranks[pooled == v] = ranks[pooled == v].mean()
    null_mean = len(a) * (len(pooled) + 1) / 2
    observed = abs(ranks[: len(a)].sum() - null_mean)
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((n_permutations, len(pooled))), axis=1)[:, : len(a)]
    sums = ranks[perms].sum(axis=1)
    return float((1 + np.sum(np.abs(sums - null_mean) >= observed - 1e-9)) / (1 + n_permutations))


@lru_cache(maxsize=8)
def _relabellings(n: int, m: int, n_permutations: int, seed: int) -> np.ndarray:
    """Which n of n + m pooled seeds each random relabelling calls the first sample's."""
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((n_permutations, n + m)), axis=1)[:, :n]


def mean_difference_test(a, b, n_permutations: int = N_RESAMPLES, seed: int = BOOT_SEED) -> float:
    """Two-sided permutation p-value of mean(a) - mean(b): how often relabelling the pooled
    seeds moves the difference at least as far from 0 as observed. The null is that both
    are draws from one seed distribution, whatever its shape (a bimodal one included)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled = np.concatenate([a, b])
    sums = pooled[_relabellings(len(a), len(b), n_permutations, seed)].sum(axis=1)
    diffs = sums / len(a) - (pooled.sum() - sums) / len(b)
    observed = abs(a.mean() - b.mean())
    return float((1 + np.sum(np.abs(diffs) >= observed - 1e-9)) / (1 + n_permutations))


EXACT_SIGN_FLIPS = 20  # up to 2^20 sign patterns enumerated; more pairs are sampled


def paired_sign_flip_test(a, b, n_permutations: int = N_RESAMPLES, seed: int = BOOT_SEED) -> float:
    """One-sided paired permutation p-value that a is lower than b, pair by pair (a[i] and
    b[i] share seed i): under the null each pair's difference is as likely negative as
    positive, so every sign pattern of the differences is equally likely; p is the share
    of patterns whose mean difference is at most the observed one. Exact up to
    EXACT_SIGN_FLIPS pairs, else n_permutations random patterns."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    if n == 0:
        raise ValueError("need at least one pair")
    if n <= EXACT_SIGN_FLIPS:
        sums = np.zeros(1)
        for x in d:  # every sign pattern's sum, built pair by pair (2^n of them)
            sums = np.concatenate([sums + x, sums - x])
        return float(np.mean(sums <= d.sum() + 1e-9))
    signs = 1 - 2 * np.random.default_rng(seed).integers(0, 2, (n_permutations, n))
    return float((1 + np.sum(signs @ d <= d.sum() + 1e-9)) / (1 + n_permutations))


@dataclass(frozen=True)
class Final:
    """The seed mean of the last step every seed logged, its SE and bootstrap interval."""
    mean: float
    se: float
    lo: float
    hi: float
    n_seeds: int
    step: int
    values: tuple = ()  # per seed, in column order: a heavy tail shows here, not in the SE


def final_stats(wide: pd.DataFrame, **boot) -> Final | None:
    if wide.empty:
        return None
    last = wide.iloc[-1].to_numpy(dtype=float)
    lo, hi = bootstrap_ci(last, **boot)
    return Final(float(last.mean()), standard_error(last), lo, hi, len(last), int(wide.index[-1]),
                 tuple(float(v) for v in last))


def steps_to_threshold(steps, values, thr: float = THRESHOLD):
    """First step whose value is strictly below thr, or None if it never gets there."""
    below = np.flatnonzero(np.asarray(values, dtype=float) < thr)
    return None if len(below) == 0 else np.asarray(steps)[below[0]].item()


def mean_steps_to_threshold(wide: pd.DataFrame, thr: float = THRESHOLD):
    """The paper's number: first step where the seed-mean curve is below thr (None: never)."""
    return steps_to_threshold(wide.index, wide.mean(axis=1).to_numpy(), thr)


@dataclass(frozen=True)
class SeedHits:
    """Per-seed steps to a threshold, censored: seeds that never got below it within
    their log are counted in n_seeds but have no step (we never invent one)."""
    threshold: float
    n_seeds: int
    seeds: tuple  # the seeds that reached it ...
    steps: tuple  # ... and their first step below the threshold, in the same order
    last_step: int | None  # end of the observation window (censoring point)

    @property
    def n_reached(self) -> int:
        return len(self.steps)

    @property
    def all_reached(self) -> bool:
        return self.n_seeds > 0 and self.n_reached == self.n_seeds

    @property
    def median(self) -> float | None:
        """Median over all seeds: defined only when every seed reached the threshold."""
        return float(np.median(self.steps)) if self.all_reached else None

    @property
    def median_reached(self) -> float | None:
        """Median over the seeds that reached it only (biased early: say so when shown)."""
        return float(np.median(self.steps)) if self.steps else None

    def describe(self) -> str:
        if self.n_seeds == 0:
            return "no seeds"
        head = f"{self.n_reached}/{self.n_seeds} seeds reached"
        if self.all_reached:
            return f"{head}, median {self.median:g}"
        if self.steps:
            return f"{head} (median of those {self.n_reached}: {self.median_reached:g}; " \
                   f"the rest not by step {self.last_step})"
        return f"{head} (by step {self.last_step})"


def seed_hits(wide: pd.DataFrame, thr: float = THRESHOLD) -> SeedHits:
    """wide may hold NaN where a seed's log ended (seed_curves(common=False))."""
    seeds, steps = [], []
    for seed in wide.columns:
        col = wide[seed].dropna()
        hit = steps_to_threshold(col.index, col.to_numpy(), thr)
        if hit is not None:
            seeds.append(seed.item() if hasattr(seed, "item") else seed)
            steps.append(hit)
    last = int(wide.index[-1]) if len(wide) else None
    return SeedHits(thr, wide.shape[1], tuple(seeds), tuple(steps), last)


def _subsets(n: int, k: int, max_subsets: int, rng: np.random.Generator) -> list[list[int]]:
    """All k-subsets of range(n) when few, else max_subsets distinct ones drawn."""
    from itertools import combinations
    from math import comb

    if comb(n, k) <= max_subsets:
        return [list(c) for c in combinations(range(n), k)]
    # distinct subsets in the order drawn: sorting them first would keep only
    # those holding the lowest-numbered seeds
    drawn = dict.fromkeys(tuple(sorted(rng.choice(n, k, replace=False)))
                          for _ in range(4 * max_subsets))
    return [list(c) for c in list(drawn)[:max_subsets]]


def _subset_crossings(w: np.ndarray, steps: np.ndarray, k: int, max_subsets: int,
                      rng: np.random.Generator, thr: float) -> np.ndarray:
    """First crossing (inf: never) of the seed-mean curve of each k-subset of the columns
    of w: all subsets when few, else max_subsets distinct ones drawn."""
    firsts = []
    for cols in _subsets(w.shape[1], k, max_subsets, rng):
        below = np.flatnonzero(w[:, cols].mean(axis=1) < thr)
        firsts.append(steps[below[0]] if len(below) else np.inf)
    return np.asarray(firsts, dtype=float)


def steps_by_seed_count(wide: pd.DataFrame, thr: float = THRESHOLD, max_subsets: int = 200,
                        seed: int = BOOT_SEED) -> tuple:
    """The paper's statistic on subsets of k seeds, for k = 1 .. n: the median over subsets
    (all of them when few, else max_subsets drawn without repetition) of the seed-mean
    curve's first crossing; None where most subsets never cross. The seed-mean crossing
    waits for the slowest seeds, so it grows with the seed count: this says how much,
    before a few-seed number is set beside a 20-seed one."""
    w, steps = wide.to_numpy(dtype=float), wide.index.to_numpy()
    rng = np.random.default_rng(seed)
    out = []
    for k in range(1, w.shape[1] + 1):
        med = np.quantile(_subset_crossings(w, steps, k, max_subsets, rng, thr), 0.5, method="higher")
        out.append(None if np.isinf(med) else int(med))
    return tuple(out)


def steps_at_seed_count(wide: pd.DataFrame, k: int, thr: float = THRESHOLD,
                        max_subsets: int = 2000, level: float = LEVEL, seed: int = BOOT_SEED):
    """The paper's statistic at its own seed count k, from more of our seeds: the seed-mean
    crossing of k-seed subsets of ours is a draw of the statistic the paper printed (the
    crossing of all our seeds is a later one: it waits for more slow seeds). Returns the
    median over subsets, the central interval and the std (value, lo, hi, se); None for a
    value or end that is "never", se None unless every subset crossed."""
    w, steps = wide.to_numpy(dtype=float), wide.index.to_numpy()
    if not 0 < k <= w.shape[1]:
        raise ValueError(f"need 1 <= k <= {w.shape[1]} seeds, got k={k}")
    firsts = _subset_crossings(w, steps, k, max_subsets, np.random.default_rng(seed), thr)
    a = (1 - level) / 2
    as_step = lambda v: None if np.isinf(v) else int(v)  # noqa: E731
    return (as_step(np.quantile(firsts, 0.5, method="higher")),
            as_step(np.quantile(firsts, a, method="lower")),
            as_step(np.quantile(firsts, 1 - a, method="higher")),
            float(firsts.std()) if np.isfinite(firsts).all() else None)


def steps_bootstrap(wide: pd.DataFrame, thr: float = THRESHOLD, level: float = LEVEL,
                    n_resamples: int = N_RESAMPLES, seed: int = BOOT_SEED):
    """Bootstrap of the paper's statistic: resample seeds (whole curves, so each keeps its
    censoring), recompute the seed-mean curve and its first crossing. Returns the 95 %
    interval (lo, hi) and the statistic's SE, the std of the resampled crossings.

    A resample whose mean never crosses counts as later than any step; an end of the
    interval that falls there is None ("never"), and the SE is then None (no finite
    spread). Conservative quantiles ('lower'/'higher'), no interpolation across "never".
    The per-seed crossings' SE would be the noise of another statistic: the seed-mean
    curve waits for its slowest seeds, so its spread is set by how often they are drawn."""
    if wide.empty:
        return None, None, None
    w = wide.to_numpy(dtype=float)  # steps x seeds
    steps = wide.index.to_numpy()
    n = w.shape[1]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=n_resamples)  # resample x seed
    firsts = []
    for chunk in np.array_split(counts, max(1, n_resamples // 1000)):
        below = (w @ chunk.T) / n < thr  # steps x resamples: each resample's mean curve
        hit = below.any(axis=0)
        firsts.append(np.where(hit, steps[below.argmax(axis=0)], np.inf))
    firsts = np.concatenate(firsts)
    a = (1 - level) / 2
    lo = np.quantile(firsts, a, method="lower")
    hi = np.quantile(firsts, 1 - a, method="higher")
    as_step = lambda v: None if np.isinf(v) else int(v)  # noqa: E731
    se = float(firsts.std()) if np.isfinite(firsts).all() else None
    return as_step(lo), as_step(hi), se


def subset_mean_tails(values, n: int, x: float, tol: float = 1e-6,
                      max_subsets: int = 200_000, seed: int = BOOT_SEED) -> tuple[float, float]:
    """Where an n-seed mean x falls among the means of n of the given seeds: the fractions
    of n-subsets whose mean is <= x and >= x (ties in both, within tol). All subsets when
    there are few, else max_subsets drawn. This is x's sampling distribution if our seeds
    and those are draws from one seed distribution: the test a bimodal outcome needs,
    where a few-seed SE says nothing about the rare seeds a 20-seed mean contains."""
    v = np.asarray(values, dtype=float)
    if not 0 < n <= len(v):
        raise ValueError(f"need 1 <= n <= {len(v)} seeds, got n={n}")
    means = v[np.array(_subsets(len(v), n, max_subsets, np.random.default_rng(seed)))].mean(axis=1)
    return float(np.mean(means <= x + tol)), float(np.mean(means >= x - tol))


@dataclass(frozen=True)
class CurveMean:
    """Mean over steps of each seed's curve (an area under the curve: smaller = faster
    for an error), its seed mean and SE."""
    mean: float
    se: float
    n_seeds: int


def curve_mean(wide: pd.DataFrame) -> CurveMean | None:
    if wide.empty:
        return None
    per_seed = wide.mean(axis=0).to_numpy(dtype=float)
    return CurveMean(float(per_seed.mean()), standard_error(per_seed), len(per_seed))
