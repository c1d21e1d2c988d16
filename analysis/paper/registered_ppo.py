"""The registered analysis of the central claim's PPO part (reproduction/registered/terminal_ppo.md).

In the paper's prompt-matched terminal table PPO's error is below GRPO's at H = 7 and 8, so
there "TPO attains the lowest error at each H" needs TPO against PPO as well as against
GRPO (registered.py). The same tests, from registered.py's functions: per H an exact
one-sided paired sign-flip test of the mean difference TPO - PPO over seeds 0-19, Holm
over the two H, one family per direction; pooled over both H with signs flipped pair by
pair; Wilcoxon's signed-rank companion. Inputs are final errors in %.

    python -m analysis.paper.registered_ppo --power   # on the paper's only per-seed values
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis.paper  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis.paper"
from . import registered as R

HORIZONS = (7, 8)
SEEDS = R.SEEDS  # the fixed N of 20: no interim test, no seed added or dropped
ALPHA = R.ALPHA  # family-wise, per direction (Holm over the two H)
POOLED_DRAWS = R.POOLED_DRAWS
POOLED_RNG = 20261207
# The runs whose results were in view when this analysis was registered, per method.
SEEN = {"tpo": {7: range(0, 9), 8: range(0, 9)}, "ppo": {7: range(0, 3), 8: range(0, 3)}}


@dataclass(frozen=True)
class Cell:
    """One H: the 20 pairs (TPO, PPO) and both directions' tests."""
    h: int
    tpo: tuple
    ppo: tuple
    p_tpo_lower: float
    p_ppo_lower: float
    rank_p_tpo_lower: float
    rank_p_ppo_lower: float

    @property
    def diff(self) -> np.ndarray:
        return np.asarray(self.tpo) - np.asarray(self.ppo)


def cell(h: int, tpo: dict, ppo: dict) -> Cell | None:
    """The tests at one H, or None until both methods have every seed of SEEDS."""
    if not all(s in tpo and s in ppo for s in SEEDS):
        return None
    a = tuple(float(tpo[s]) for s in SEEDS)
    b = tuple(float(ppo[s]) for s in SEEDS)
    d = np.asarray(a) - np.asarray(b)
    sr = R.signed_ranks(d)
    dist = R.rank_distribution(sr)
    return Cell(h, a, b, R.p_lower(d), R.p_lower(-d), R.p_from(dist, sr.sum()), R.p_from(dist, -sr.sum()))


@dataclass(frozen=True)
class Outcome:
    cells: dict  # h -> Cell, complete H only
    seeds_run: dict  # h -> seeds both methods completed
    holm_tpo_lower: dict
    holm_ppo_lower: dict
    pooled: dict | None  # p and rank p per direction, once both H are complete

    def reading(self, h: int) -> str:
        """What the registration calls the result at one H."""
        if h not in self.cells:
            return f"{self.seeds_run.get(h, 0)} of {len(SEEDS)} seeds run: no test until {len(SEEDS)}"
        if h not in self.holm_tpo_lower:
            return "complete: read with Holm once both H are complete"
        if self.holm_tpo_lower[h] <= ALPHA:
            return "TPO lower"
        if self.holm_ppo_lower[h] <= ALPHA:
            return "PPO lower"
        return "not separated"

    def pooled_reading(self) -> str:
        if self.pooled is None:
            return "no pooled test until both H have 20 seeds"
        if self.pooled["p_tpo_lower"] <= ALPHA:
            return "TPO lower pooled over H = 7-8"
        if self.pooled["p_ppo_lower"] <= ALPHA:
            return "PPO lower pooled over H = 7-8"
        return "not separated pooled over H = 7-8"

    def claim(self) -> str:
        """The verdict on the claim's PPO part: TPO's error below PPO's at H = 7 and 8."""
        if len(self.cells) < len(HORIZONS):
            done = ", ".join(str(h) for h in HORIZONS if h in self.cells) or "none"
            return f"not tested yet: {len(self.cells)} of {len(HORIZONS)} H complete (complete: {done})"
        read = {h: self.reading(h) for h in HORIZONS}
        worse = [h for h in HORIZONS if read[h] == "PPO lower"]
        better = [h for h in HORIZONS if read[h] == "TPO lower"]
        if worse:
            return "contradicted: PPO's error is lower at H = " + ", ".join(map(str, worse))
        if len(better) == len(HORIZONS):
            return "supported: TPO's error is lower than PPO's at H = 7 and 8"
        rest = [h for h in HORIZONS if h not in better]
        shown = f"TPO lower at H = {', '.join(map(str, better))}; " if better else ""
        return f"not settled: {shown}not separated at H = " + ", ".join(map(str, rest))


def judge(finals: dict) -> Outcome:
    """finals: h -> (tpo {seed: final error %}, ppo {seed: final error %})."""
    cells, seeds_run = {}, {}
    for h in HORIZONS:
        tpo, ppo = finals.get(h, ({}, {}))
        seeds_run[h] = sum(s in tpo and s in ppo for s in SEEDS)
        c = cell(h, tpo, ppo)
        if c is not None:
            cells[h] = c
    complete = len(cells) == len(HORIZONS)
    hl = R.holm({h: c.p_tpo_lower for h, c in cells.items()}) if complete else {}
    hp = R.holm({h: c.p_ppo_lower for h, c in cells.items()}) if complete else {}
    pooled = None
    if complete:
        diffs = [cells[h].diff for h in HORIZONS]
        pooled = {"p_tpo_lower": R.pooled_p(diffs, POOLED_DRAWS, POOLED_RNG),
                  "p_ppo_lower": R.pooled_p([-d for d in diffs], POOLED_DRAWS, POOLED_RNG),
                  "rank_p_tpo_lower": R.pooled_rank_p(diffs),
                  "rank_p_ppo_lower": R.pooled_rank_p([-d for d in diffs])}
    return Outcome(cells, seeds_run, hl, hp, pooled)


def combined(grpo_claim: str, ppo_claim: str) -> str:
    """The paper's claim over both registered analyses, from each one's claim()."""
    parts = f"against GRPO {grpo_claim}; against PPO {ppo_claim}"
    claims = (grpo_claim, ppo_claim)
    if any(c.startswith("contradicted") for c in claims):
        return f"contradicted ({parts})"
    if all(c.startswith("supported") for c in claims):
        return "supported: TPO's error is lower than GRPO's at every H = 7-10 and than PPO's at H = 7 and 8"
    if any(c.startswith("not tested") for c in claims):
        return f"not tested yet ({parts})"
    return f"not settled ({parts})"


def power(tpo, other, draws: int = 2000, seed: int = 0) -> dict:
    """How often one H's test at 20 seeds finds TPO lower at Holm's strictest step for two H
    (ALPHA / 2) and at ALPHA, on 20 pairs drawn with replacement from (tpo, other); and, with
    each pair's labels swapped at random, how often it does (the false-positive rate)."""
    a, b = np.asarray(tpo, dtype=float), np.asarray(other, dtype=float)
    rng = np.random.default_rng(seed)
    hits = {"power_at_alpha_over_2": 0, "power_at_alpha": 0, "null_at_alpha_over_2": 0, "null_at_alpha": 0}
    for _ in range(draws):
        i = rng.integers(0, len(a), len(SEEDS))
        d = a[i] - b[i]
        q = d * (1.0 - 2.0 * rng.integers(0, 2, len(d)))
        for name, x in (("power", d), ("null", q)):
            p = R.p_lower(x)
            hits[f"{name}_at_alpha_over_2"] += p <= ALPHA / len(HORIZONS)
            hits[f"{name}_at_alpha"] += p <= ALPHA
    return {k: v / draws for k, v in hits.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The PPO analysis's power on the paper's per-seed values")
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
        print(f"paper's H = 10 TPO and GRPO seeds ({len(seeds)} pairs; the paper has no per-seed PPO), "
              f"{a.draws} redraws of 20 pairs:")
        for k, v in res.items():
            print(f"  {k}: {v:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
