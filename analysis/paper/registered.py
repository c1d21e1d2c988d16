"""The registered analysis of the central claim (reproduction/registered/terminal_h_sweep.md).

Under terminal reward, is TPO's final error below GRPO's at H = 7, 8, 9 and 10? Per H:
an exact one-sided paired sign-flip test of the mean difference over seeds 0-19 (a seed
fixes the initial weights and the prompts), Holm over the four H, one family per
direction. Pooled: the sum of the four per-H mean differences, signs flipped pair by pair
(so within H). Companion: Wilcoxon's signed-rank statistic, per H exactly and pooled (the
sum of the per-H statistics) exactly by convolution. Self-contained (numpy only), so that
no later edit elsewhere changes what was registered. Inputs are final errors in %.

    python -m analysis.paper.registered --power   # the tests' power on the paper's seeds
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

HORIZONS = (7, 8, 9, 10)
SEEDS = tuple(range(20))  # the fixed N: no interim test, no seed added or dropped
ALPHA = 0.05  # family-wise, per direction (Holm over the four H)
POOLED_DRAWS = 200_000  # random sign patterns for the pooled mean test (2^80 cannot be listed)
POOLED_RNG = 20261206
TOL = 1e-9  # ties between a permuted and the observed statistic count as "at least as extreme"
# The runs that existed when this analysis was registered: their results were in view.
SEEN = {7: range(0, 3), 8: range(0, 3), 9: range(0, 2), 10: range(0, 20)}


def sign_flip_sums(d: np.ndarray) -> np.ndarray:
    """Every sign pattern's sum of d (2^n values)."""
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate([sums + x, sums - x])
    return sums


def p_lower(d) -> float:
    """Exact one-sided p that the paired differences d are centred below 0: the share of
    the 2^n sign patterns whose sum is at most the observed sum."""
    d = np.asarray(d, dtype=float)
    return float(np.mean(sign_flip_sums(d) <= d.sum() + TOL))


def signed_ranks(d) -> np.ndarray:
    """Wilcoxon's signed ranks: zero differences dropped, mid-ranks of |d| for ties."""
    d = np.asarray(d, dtype=float)
    d = d[np.abs(d) > TOL]
    a = np.round(np.abs(d), 9)
    order = a.argsort(kind="stable")
    r = np.empty(len(a))
    r[order] = np.arange(1, len(a) + 1)
    for v in np.unique(a):
        r[a == v] = r[a == v].mean()
    return np.sign(d) * r


def rank_distribution(sr: np.ndarray) -> dict[float, float]:
    """The exact null distribution of sum(sr) over sign flips: value -> probability."""
    sums = np.round(sign_flip_sums(np.abs(sr)) * 2) / 2  # mid-ranks are multiples of 1/2
    values, counts = np.unique(sums, return_counts=True)
    return dict(zip(values.tolist(), (counts / counts.sum()).tolist()))


def p_from(dist: dict[float, float], observed: float) -> float:
    return float(sum(p for v, p in dist.items() if v <= observed + TOL))


def convolve(dists: list[dict[float, float]]) -> dict[float, float]:
    out = {0.0: 1.0}
    for dist in dists:
        nxt: dict[float, float] = {}
        for a, pa in out.items():
            for b, pb in dist.items():
                nxt[a + b] = nxt.get(a + b, 0.0) + pa * pb
        out = nxt
    return out


def holm(ps: dict) -> dict:
    """Holm-adjusted p-values (step-down, monotone), keyed as given."""
    keys = sorted(ps, key=lambda k: ps[k])
    out, running = {}, 0.0
    for i, k in enumerate(keys):
        running = max(running, min(1.0, (len(keys) - i) * ps[k]))
        out[k] = running
    return out


@dataclass(frozen=True)
class Cell:
    """One H: the 20 paired differences TPO - GRPO and both directions' tests."""
    h: int
    tpo: tuple
    grpo: tuple
    p_tpo_lower: float
    p_grpo_lower: float
    rank_p_tpo_lower: float
    rank_p_grpo_lower: float

    @property
    def diff(self) -> np.ndarray:
        return np.asarray(self.tpo) - np.asarray(self.grpo)


def cell(h: int, tpo: dict, grpo: dict) -> Cell | None:
    """The tests at one H, or None until both methods have every seed of SEEDS."""
    if not all(s in tpo and s in grpo for s in SEEDS):
        return None
    a = tuple(float(tpo[s]) for s in SEEDS)
    b = tuple(float(grpo[s]) for s in SEEDS)
    d = np.asarray(a) - np.asarray(b)
    sr = signed_ranks(d)
    dist = rank_distribution(sr)
    return Cell(h, a, b, p_lower(d), p_lower(-d), p_from(dist, sr.sum()), p_from(dist, -sr.sum()))


def pooled_p(diffs: list[np.ndarray], draws: int = POOLED_DRAWS, seed: int = POOLED_RNG) -> float:
    """One-sided p that the sum over H of the per-H mean differences is below 0: random sign
    patterns, one sign per (H, seed) pair; (1 + hits) / (1 + draws)."""
    d = np.concatenate([x / len(x) for x in diffs])
    rng = np.random.default_rng(seed)
    hits, left = 0, draws
    while left:
        n = min(left, 20_000)
        signs = 1.0 - 2.0 * rng.integers(0, 2, (n, len(d)))
        hits += int(np.sum(signs @ d <= d.sum() + TOL))
        left -= n
    return (1 + hits) / (1 + draws)


def pooled_rank_p(diffs: list[np.ndarray]) -> float:
    """Exact one-sided p of the sum of the per-H signed-rank statistics (ranks within H)."""
    srs = [signed_ranks(d) for d in diffs]
    return p_from(convolve([rank_distribution(sr) for sr in srs]), sum(float(sr.sum()) for sr in srs))


@dataclass(frozen=True)
class Outcome:
    cells: dict  # h -> Cell, complete H only
    seeds_run: dict  # h -> seeds both methods completed
    holm_tpo_lower: dict
    holm_grpo_lower: dict
    pooled: dict | None  # p and rank p per direction, once every H is complete

    def reading(self, h: int) -> str:
        """What the registration calls the result at one H."""
        if h not in self.cells:
            return f"{self.seeds_run.get(h, 0)} of {len(SEEDS)} seeds run: no test until {len(SEEDS)}"
        if h not in self.holm_tpo_lower:
            return "complete: read with Holm once every H is complete"
        if self.holm_tpo_lower[h] <= ALPHA:
            return "TPO lower"
        if self.holm_grpo_lower[h] <= ALPHA:
            return "GRPO lower"
        return "not separated"

    def pooled_reading(self) -> str:
        if self.pooled is None:
            return "no pooled test until every H has 20 seeds"
        if self.pooled["p_tpo_lower"] <= ALPHA:
            return "TPO lower pooled over H = 7-10"
        if self.pooled["p_grpo_lower"] <= ALPHA:
            return "GRPO lower pooled over H = 7-10"
        return "not separated pooled over H = 7-10"

    def claim(self) -> str:
        """The verdict on "TPO attains the lowest error at each tested H" (against GRPO)."""
        if len(self.cells) < len(HORIZONS):
            done = ", ".join(str(h) for h in HORIZONS if h in self.cells) or "none"
            return f"not tested yet: {len(self.cells)} of {len(HORIZONS)} H complete (complete: {done})"
        read = {h: self.reading(h) for h in HORIZONS}
        worse = [h for h in HORIZONS if read[h] == "GRPO lower"]
        better = [h for h in HORIZONS if read[h] == "TPO lower"]
        if worse:
            return "contradicted: GRPO's error is lower at H = " + ", ".join(map(str, worse))
        if len(better) == len(HORIZONS):
            return "supported: TPO's error is lower than GRPO's at every H = 7-10"
        rest = [h for h in HORIZONS if h not in better]
        shown = f"TPO lower at H = {', '.join(map(str, better))}; " if better else ""
        return f"not settled: {shown}not separated at H = " + ", ".join(map(str, rest))


def judge(finals: dict) -> Outcome:
    """finals: h -> (tpo {seed: final error %}, grpo {seed: final error %})."""
    cells, seeds_run = {}, {}
    for h in HORIZONS:
        tpo, grpo = finals.get(h, ({}, {}))
        seeds_run[h] = sum(s in tpo and s in grpo for s in SEEDS)
        c = cell(h, tpo, grpo)
        if c is not None:
            cells[h] = c
    hl = holm({h: c.p_tpo_lower for h, c in cells.items()}) if len(cells) == len(HORIZONS) else {}
    hg = holm({h: c.p_grpo_lower for h, c in cells.items()}) if len(cells) == len(HORIZONS) else {}
    pooled = None
    if len(cells) == len(HORIZONS):
        diffs = [cells[h].diff for h in HORIZONS]
        pooled = {"p_tpo_lower": pooled_p(diffs), "p_grpo_lower": pooled_p([-d for d in diffs]),
                  "rank_p_tpo_lower": pooled_rank_p(diffs),
                  "rank_p_grpo_lower": pooled_rank_p([-d for d in diffs])}
    return Outcome(cells, seeds_run, hl, hg, pooled)


def power(tpo, grpo, draws: int = 2000, seed: int = 0) -> dict:
    """How often one H's test at 20 seeds finds TPO lower at the Holm threshold of the
    first-ranked (ALPHA / 4) and last-ranked (ALPHA) H, on 20 pairs drawn with replacement
    from (tpo, grpo); and, with each pair's labels swapped at random (a null with these
    values), how often it does (the false-positive rate)."""
    a, b = np.asarray(tpo, dtype=float), np.asarray(grpo, dtype=float)
    rng = np.random.default_rng(seed)
    hit_strict = hit_loose = null_strict = null_loose = 0
    for _ in range(draws):
        i = rng.integers(0, len(a), len(SEEDS))
        d = a[i] - b[i]
        p = p_lower(d)
        hit_strict += p <= ALPHA / len(HORIZONS)
        hit_loose += p <= ALPHA
        q = p_lower(d * (1.0 - 2.0 * rng.integers(0, 2, len(d))))
        null_strict += q <= ALPHA / len(HORIZONS)
        null_loose += q <= ALPHA
    return {"power_at_alpha_over_4": hit_strict / draws, "power_at_alpha": hit_loose / draws,
            "null_at_alpha_over_4": null_strict / draws, "null_at_alpha": null_loose / draws}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The registered analysis's power on the paper's seeds")
    p.add_argument("--power", action="store_true")
    p.add_argument("--draws", type=int, default=2000)
    a = p.parse_args(argv)
    if a.power:
        import csv
        from pathlib import Path

        rows = [r for r in csv.reader(l for l in (Path(__file__).with_name("paper_seeds.csv"))
                                      .read_text().splitlines() if not l.startswith("#"))][1:]
        by = {g: {int(s): float(v) for gg, s, v in rows if gg == g} for g in {r[0] for r in rows}}
        tpo, grpo = by["terminal-tpo-H10"], by["terminal-grpo-H10"]
        seeds = sorted(set(tpo) & set(grpo))
        res = power([tpo[s] for s in seeds], [grpo[s] for s in seeds], a.draws)
        print(f"paper's H = 10 seeds ({len(seeds)} pairs), {a.draws} redraws of 20 pairs:")
        for k, v in res.items():
            print(f"  {k}: {v:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
