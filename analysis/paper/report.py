"""Write REPRODUCTION.md: every paper number beside ours, with a computed verdict.

    python analysis/paper/report.py [--results FILE] [--out FILE] [--figures DIR]
                                    [--runs ROOT] [--hardware TEXT] [--findings FILE] [--quiet]

Defaults: outputs/results.parquet -> outputs/REPRODUCTION.md and outputs/figures/; the
committed reproduction/REPRODUCTION.md is regenerated only by naming it. A missing or
empty table, or one no paper number is judged on, is refused (exit 2) before writing.
For each paper result (experiments.py) it draws the figure (figures.py) and, for each row
of paper_numbers.csv, computes our statistic (analysis/stats.py) and a verdict
(verdicts.py, whose rules head the report); sections without results say "not run yet".
Hardware comes from each run's summary.json under --runs and/or --hardware. The summary
counts each paper number and each run once; where the paper's per-seed values are known,
ours are drawn beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis.paper  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis.paper"
from .. import collect, stats
from ..configs import pick_config
from . import experiments, figures, paper_figures, registered, registered_ppo, rule_dates
from . import verdicts as V
from .experiments import ALIASES, EXPERIMENTS
from ..style import fmt
from ..tuning import tuned
from ...contract import io, schema
from ...contract.registry import TASKS

PAPER = Path(__file__).with_name("paper_numbers.csv")
PAPER_SEEDS = Path(__file__).with_name("paper_seeds.csv")
SETTINGS = ["H", "V", "K", "B", "epochs", "eta", "match", "D", "reward", "target"]
VERDICT_ORDER = [V.REPRODUCED, V.NOT_DISTINGUISHABLE, V.INCONCLUSIVE, V.DIFFERS, V.TOO_SHORT, V.HOLDS, V.FAILS,
                 V.BEYOND, V.NOT_RUN, V.NEEDS_GPU]


def verdict_kind(verdict: str) -> str:
    """'inconclusive (3 seeds)' -> 'inconclusive': the summary counts kinds."""
    return verdict.split(" (")[0]


def load_paper(path=PAPER) -> pd.DataFrame:
    # Strings throughout: ">95", "—" and "0.05" must reach the verdict rules as printed.
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def load_paper_seeds(path=PAPER_SEEDS) -> dict[str, tuple]:
    """replicate_group -> the paper's per-seed final errors (%), where its artifact has them."""
    t = pd.read_csv(path, comment="#")
    return {g: tuple(d.sort_values("seed")["final_error_pct"]) for g, d in t.groupby("replicate_group")}


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def settings(row, quals: dict | None = None) -> dict:
    """Filter block for experiments.matches from a paper row (';' separates alternatives)."""
    cond = {k: [_value(v) for v in row[k].split(";")] for k in SETTINGS if row.get(k, "")}
    cond.update({k: [_value(v)] for k, v in (quals or {}).items()})
    return cond


@dataclass(frozen=True)
class Ours:
    value: float | None  # None: a steps metric whose seed-mean curve never crossed
    se: float | None
    lo: float | None
    hi: float | None
    n_seeds: int
    last_step: int | None = None
    hits: stats.SeedHits | None = None
    source: str = ""
    by_seeds: tuple = ()  # steps metrics: the statistic on 1 .. n of our seeds
    all_seeds: float | None = None  # steps metrics at the paper's seed count: all of ours
    per_seed: tuple = ()  # final error: each seed's value


HEADLINE = ("tpo", "grpo", "dg", "grpo_no_kl", "ppo")  # what the study queue runs (reproduction/study.yaml),
HEADLINE_ROWS = ("terminal_h_sweep", "ablations")  # for these experiments' rows
SEEDS_TITLE = "Terminal reward, H = 10: per-seed final error, ours and the paper's"
SEEDS_CAPTION = ("Per-seed final error, prompt-matched, where the paper's seeds are known "
                 "(`analysis/paper/paper_seeds.csv`: its artifact's 20 per method): the outcome is "
                 "bimodal, so the empirical distributions are drawn side by side (ours solid, the "
                 "paper's dashed), with the count of seeds below 1 % and the p-value of a two-sample "
                 "rank-sum permutation test of the two sets of seeds (a reading, not a verdict; "
                 "the rows' notes compare seed means instead).")
PER_SEED_SHOWN = 10  # with few seeds a mean hides a bimodal outcome; list them
LOG_FLOOR = 1e-8  # float32 resolution near 1 is ~1e-7


def measure(rows: pd.DataFrame, metric: str, n_paper: int | None = None) -> Ours | None:
    """Our statistic for one metric on the rows of one configuration. n_paper: the paper's
    seed count, at which a steps statistic is taken when we have more seeds."""
    if rows.empty:
        return None
    if metric.startswith("steps_to_"):
        thr = float(metric.removeprefix("steps_to_").removesuffix("pct")) / 100
        wide = stats.seed_curves(rows)
        if wide.empty:
            return None
        hits = stats.seed_hits(stats.seed_curves(rows, common=False), thr)
        ours = stats.mean_steps_to_threshold(wide, thr)
        if n_paper and wide.shape[1] > n_paper:
            value, lo, hi, se = stats.steps_at_seed_count(wide, n_paper, thr, level=V.LEVEL)
            return Ours(value, se, lo, hi, wide.shape[1], int(wide.index[-1]), hits,
                        all_seeds=ours)
        lo, hi, se = stats.steps_bootstrap(wide, thr, level=V.LEVEL)
        return Ours(ours, se, lo, hi, wide.shape[1], int(wide.index[-1]), hits,
                    by_seeds=stats.steps_by_seed_count(wide, thr))
    y, scale = {"final_error_pct": ("error", 100), "auc_error": ("error", 100),
                "mean_misalignment": ("misalignment", 1), "mean_log10_error": ("error", 1),
                "mean_log10_misalignment": ("misalignment", 1)}[metric]
    if y not in rows.columns:
        return None
    wide = stats.seed_curves(rows, y)
    if metric.startswith("mean_log10_"):
        # The paper draws these panels on log axes (docs/figures.md): "faster" and "lower" there are
        # read in log space. Below LOG_FLOOR a float32 value is rounding, not signal.
        wide = np.log10(wide.clip(lower=LOG_FLOOR))
    if metric == "final_error_pct":
        f = stats.final_stats(wide)
        if f is None:
            return None
        lo, hi = stats.t_interval(f.values, V.LEVEL)
        return Ours(f.mean * scale, f.se * scale, lo * scale, hi * scale, f.n_seeds, f.step,
                    per_seed=tuple(v * scale for v in f.values))
    c = stats.curve_mean(wide)
    return c and Ours(c.mean * scale, c.se * scale, None, None, c.n_seeds, int(wide.index[-1]))


WEIGHT = "weight_p"  # a formula row's metric: weight_p<pi_y>, the paper's weight_p0.1


def analytic_weight(algo: str, p: float) -> float:
    """science §Tabular bandits' weight w of `algo` at pi_y = p: tabular_multi's
    `analytic_weight` (contract.batch.TaskOptions), looked up in the task table."""
    weight = TASKS.get("tabular_multi").analytic_weight
    if weight is None:
        raise ValueError("task tabular_multi declares no analytic_weight "
                         "(contract.batch.TaskOptions): the weight rows cannot be computed")
    return weight(algo, p)


def config_rows(sel: pd.DataFrame, row, algo: str, quals=None) -> pd.DataFrame:
    """The runs one paper row is judged on: one configuration of its setting."""
    return pick_config(sel[experiments.matches(sel, {**settings(row, quals), "algo": algo})])


def ours_for(sel: pd.DataFrame, row, algo: str, quals=None, rows=None) -> Ours | None:
    if row["metric"].startswith(WEIGHT):
        w = analytic_weight(algo, float(row["metric"].removeprefix(WEIGHT)))
        return Ours(w, 0.0, w, w, 0, source="science §Tabular bandits formula")
    rows = config_rows(sel, row, algo, quals) if rows is None else rows
    return measure(rows, row["metric"], int(row["seeds"]) if row["seeds"] else None)


def paper_key(row) -> tuple:
    """What the paper printed, independent of the section judging it: mnist_holdout
    re-judges mnist's numbers on other runs, and the ablation table reprints the H sweep's
    TPO 7.4 % (one replicate_group, one value). A replicate printed with another value
    (TPO's interaction-matched 19.0 %) is another number."""
    setting = "|".join(row[k] for k in ["task", *SETTINGS])
    if row["kind"] == "ordering":
        return ("claim", setting, row["metric"], row["value"], row["over"], row["at_least"])
    return ("number", row["replicate_group"] or setting, row["algo"], row["metric"],
            row["value"], row["offset"])


def run_ids(rows: pd.DataFrame) -> frozenset:
    """A run is one (config hash, seed), whichever sections and rows use it."""
    if rows.empty:
        return frozenset()
    pairs = rows[["config_hash", "seed"]].drop_duplicates().itertuples(index=False)
    return frozenset((str(h), int(s)) for h, s in pairs)


def number_text(v, digits: int = 3) -> str:
    """Steps as integers, everything else to a few significant digits."""
    if v is None:
        return "never"
    if not np.isfinite(v):  # one seed: an interval without bounds
        return "nan" if np.isnan(v) else ("∞" if v > 0 else "-∞")
    if isinstance(v, (int, np.integer)) or abs(v) >= 10 ** digits:
        return f"{int(round(v))}"
    text = f"{v:.{digits}g}"
    if "e+" in text:  # rounded up past the digits (99.7 to 2: "1e+02"): positional instead
        return np.format_float_positional(v, precision=digits, unique=False, fractional=False, trim="-")
    return text


def seed_tails(row, ours: Ours, paper_seeds: dict) -> tuple | None:
    """Where our final error falls among the means of as many of the paper's own seeds."""
    values = paper_seeds.get(row["replicate_group"])
    if (not values or row["metric"] != "final_error_pct" or ours.value is None
            or not 0 < ours.n_seeds <= len(values)):
        return None
    return stats.subset_mean_tails(values, ours.n_seeds, ours.value)


def known_seeds(row, paper_seeds: dict) -> tuple:
    """The paper's per-seed final errors of a final-error row's configuration, where its
    artifact has them (paper_seeds.csv), else ()."""
    values = paper_seeds.get(row["replicate_group"], ())
    return tuple(values) if row["metric"] == "final_error_pct" else ()


def number_verdict(row, ours: Ours, paper_seeds: dict | None = None) -> str:
    paper = V.parse_paper(row["value"])
    if ours.source:  # computed from the science page's formulas, not from runs
        return V.formula_verdict(paper, ours.value)
    n = ours.n_seeds
    if paper.kind == "bound":
        return V.bound_verdict(paper, ours.lo, ours.hi, n)
    margin = V.replicate_margin(V.MARGINS[row["family"]], known_seeds(row, paper_seeds or {}))
    if paper.kind == "never":
        run_length = int(row["episodes"]) if row["episodes"] else (ours.last_step or 0) + 1
        return V.never_verdict(margin, ours.lo, ours.hi, n, run_length)
    if row["offset"]:  # the paper's x axis is offset from ours (MNIST: see the note)
        paper = V.Paper("number", paper.value + float(row["offset"]), paper.r, approx=paper.approx)
    if row["metric"].startswith("steps_to_"):
        return V.steps_verdict(paper, margin, ours.value, ours.lo, ours.hi, n, ours.last_step)
    own = known_seeds(row, paper_seeds or {})
    if own and paper.kind == "number":
        rate = V.own_seeds_pass_rate(paper, margin, own)
        if rate < V.OWN_SEEDS_FLOOR:
            return V.beyond(rate)
    return V.number_verdict(paper, margin, ours.lo, ours.hi, n)


def unjudged(row) -> str:
    """The status of a row no rule judges (verdicts.UNJUDGED), else ""."""
    return V.UNJUDGED.get(row["family"], "")


def ours_text(ours: Ours) -> str:
    """Our value and its SE, "22.2 ± 7.7"; one seed has no SE to print."""
    se = ours.se is not None and ours.value is not None and not ours.source and (ours.n_seeds or 0) > 1
    return number_text(ours.value) + (f" ± {number_text(ours.se, 2)}" if se else "")


def number_line(row, sel, paper_seeds: dict | None = None, provenance: dict | None = None) -> dict:
    """One table row. Keys starting with "_" are for the summary's counting, not shown.
    provenance (run_provenance): adds what the row's runs were recorded under."""
    formula = row["metric"].startswith(WEIGHT)
    status = unjudged(row)
    rows = sel.iloc[:0] if formula or status or sel.empty else config_rows(sel, row, row["algo"])
    ours = None if status else ours_for(sel, row, row["algo"], rows=rows)
    paper = row["value"] + (f" (+{row['offset']})" if row["offset"] else "")
    setting = ", ".join(f"{k}={row[k]}" for k in SETTINGS if row[k])
    n_paper = int(row["seeds"]) if row["seeds"] else None
    n = ours.n_seeds if ours is not None else 0
    hidden = {"_key": paper_key(row), "_group": row["replicate_group"], "_runs": run_ids(rows),
              "_formula": formula, "_n": n,
              "_known_seeds": bool(known_seeds(row, paper_seeds or {})),
              "_paper_seeds": n_paper, "_below": bool(n_paper and 0 < n < n_paper),
              "_per_seed": (ours.per_seed if ours is not None and row["metric"] == "final_error_pct"
                            else ())}
    out = {"citation": row["citation"], "setting": setting, "algorithm": row["algo"],
           "metric": row["metric"], "paper": paper}
    prov = {} if provenance is None else {"provenance": provenance_text(hidden["_runs"], provenance)}
    if ours is None:
        return {**out, "ours": "", "90 % interval": "", "seeds": "", "verdict": status or V.NOT_RUN,
                "notes": row["note"], **prov, **hidden}
    notes = [row["note"]] if row["note"] else []
    if ours.hits is not None:
        notes.append(ours.hits.describe())
    if ours.source:
        notes.append(ours.source)
    if 0 < len(ours.per_seed) <= PER_SEED_SHOWN:
        notes.append("per seed: " + ", ".join(number_text(v, 2) for v in sorted(ours.per_seed)))
    if row["metric"].startswith("steps_to_") and row["seeds"] and ours.n_seeds > int(row["seeds"]):
        notes.append(f"the paper's statistic at its {row['seeds']} seeds: median and central "
                     f"{V.LEVEL * 100:g} % "
                     f"over {row['seeds']}-seed subsets of our {ours.n_seeds} (the crossing of all "
                     f"{ours.n_seeds}: {number_text(ours.all_seeds)})")
    if len(ours.by_seeds) >= 3 and row["seeds"] and ours.n_seeds < int(row["seeds"]):
        trend = "/".join(number_text(v) for v in ours.by_seeds)
        notes.append(f"seed-mean crossing on 1..{ours.n_seeds} of our seeds (median over "
                     f"subsets): {trend}; the paper used {row['seeds']}")
    tails = seed_tails(row, ours, paper_seeds or {})
    if tails is not None:
        n_paper = len(paper_seeds[row["replicate_group"]])
        if ours.n_seeds < n_paper:  # at the paper's count only one subset exists: no spread to place ours in
            notes.append(f"means of {ours.n_seeds} of the paper's {n_paper} seeds: {tails[0]:.1%} "
                         f"at or below ours, {tails[1]:.1%} at or above")
        theirs = paper_seeds[row["replicate_group"]]
        notes.append(f"seeds below {stats.SOLVED_PCT:g} % error: ours {stats.n_below(ours.per_seed)}/"
                     f"{ours.n_seeds}, the paper's {stats.n_below(theirs)}/{len(theirs)} "
                     f"(figure `{figures.SEEDS_FIGURE}`)")
        margin = V.replicate_margin(V.MARGINS[row["family"]], theirs)
        if margin is not V.MARGINS[row["family"]]:
            notes.append(f"margin ± {margin.delta:.3g}: {margin.why}")
        if ours.per_seed:
            notes.append(f"two-sided permutation test of our seed mean against the paper's "
                         f"{len(theirs)} seeds: p = {stats.mean_difference_test(ours.per_seed, theirs):.2g}")
    if row["seeds"] and 0 < ours.n_seeds < int(row["seeds"]) and not ours.source:
        ids = rows["seed"]
        notes.append(f"below the paper's {row['seeds']} seeds: ours are seeds "
                     f"{', '.join(str(int(i)) for i in sorted(ids.unique()))}"
                     + ("; the rest: the study queue (`python -m tools.study status`)" if row["experiment"] in HEADLINE_ROWS
                        and row["algo"] in HEADLINE else ""))
    if row["episodes"] and ours.last_step is not None and ours.last_step < int(row["episodes"]) - 1:
        notes.append(f"our runs stop at step {ours.last_step} (the paper ran {row['episodes']})")
    verdict = number_verdict(row, ours, paper_seeds)
    printed = V.parse_paper(row["value"])
    if (verdict == V.REPRODUCED and printed.kind == "number" and not row["offset"]
            and not row["metric"].startswith("steps_to_")
            and (ours.lo > printed.value + printed.r or ours.hi < printed.value - printed.r)):
        notes.append("inside the margin, but our interval excludes the paper's value: a "
                     "difference is shown, smaller than the margin")
    interval = "" if ours.source else f"[{number_text(ours.lo)}, {number_text(ours.hi)}]"
    seeds = f"{ours.n_seeds} (< {row['seeds']})" if hidden["_below"] else str(ours.n_seeds or "formula")
    other = experiments.borrowed_matching(rows, row["match"])
    if other:
        word = other.replace("prompts", "prompt").replace("interactions", "interaction")
        seeds += f", {word}-matched runs"
        notes.append(f"judged on the {word}-matched runs of the same configuration")
    return {**out, "ours": ours_text(ours), "90 % interval": interval, "seeds": seeds, "verdict": verdict,
            "notes": "; ".join(notes), **prov, **hidden}


def _claim_once(sel, row, left, op, right, cond_extra=None):
    """Evaluate one claim on one setting; None if some item has no results."""
    def get(items):
        return [ours_for(sel, row, algo, {**(cond_extra or {}), **quals}) for algo, quals in items]
    a, b = get(left), get(right)
    name = lambda it: it[0] + "".join(f"[{k}={v}]" for k, v in it[1].items())  # noqa: E731
    text = ", ".join(f"{name(it)} {number_text(o.value)} ({V.seeds(o.n_seeds)})"
                     for it, o in zip(left + right, a + b) if o is not None)
    ran_a, ran_b = [o for o in a if o is not None], [o for o in b if o is not None]
    complete = len(ran_a) == len(a) and len(ran_b) == len(b)
    if op == "~":
        if not complete:
            return None, text
        n = min(a[0].n_seeds, b[0].n_seeds)
        return V.close_verdict(a[0].value, a[0].se, b[0].value, b[0].se, n), text
    if not (ran_a and ran_b):
        return None, text
    n = min(o.n_seeds for o in ran_a + ran_b)
    verdict = V.ordering_verdict([o.value for o in ran_a], [o.value for o in ran_b], op, n)
    # items not run yet can still break a claim that holds so far, never mend one that fails
    return (verdict if complete or verdict == V.FAILS else None), text


def ordering_line(row, sel) -> dict:
    left, op, right = V.parse_claim(row["value"])
    out = {"citation": row["citation"], "claim": row["value"], "metric": row["metric"]}
    hidden = {"_key": paper_key(row), "_formula": False, "_over": bool(row["over"])}
    if unjudged(row):
        return {**out, "ours": "", "verdict": unjudged(row), "notes": row["note"], **hidden}
    if not row["over"]:
        verdict, text = _claim_once(sel, row, left, op, right)
        return {**out, "ours": text, "verdict": verdict or V.NOT_RUN, "notes": row["note"], **hidden}
    keys = row["over"].split(",")
    cols = [ALIASES.get(k, k) for k in keys]
    algos = [a for a, _ in left + right]
    scope = sel[experiments.matches(sel, {**settings(row), "algo": algos})]
    results = []
    for values, _ in scope.groupby(cols, sort=True) if all(c in scope for c in cols) else []:
        values = values if isinstance(values, tuple) else (values,)
        extra = {k: v.item() if hasattr(v, "item") else v for k, v in zip(keys, values)}
        verdict, _ = _claim_once(sel, row, left, op, right, extra)
        if verdict is not None:
            results.append((", ".join(f"{k}={fmt(v)}" for k, v in extra.items()), verdict))
    need, out_of = int(row["at_least"]), int(row["out_of"] or row["at_least"])
    held = sum(v == V.HOLDS for _, v in results)
    failed = [s for s, v in results if v == V.FAILS]
    unsure = [(s, v) for s, v in results if V.INCONCLUSIVE in v]
    text = f"holds in {held} of {len(results)}" + (f"; fails at {'; '.join(failed)}" if failed else "")
    if unsure:
        text += "; inconclusive at " + "; ".join(f"{s} ({v.split('(')[1]}" for s, v in unsure)
    verdict = V.count_verdict(held, len(failed), need, out_of, len(results))
    if verdict.startswith(V.INCONCLUSIVE) and held + len(unsure) >= need:
        verdict = V.inconclusive(min(int(v.split("(")[1].split()[0]) for _, v in unsure))
    notes = row["note"] + (f" (needs {need})" if row["note"] else f"needs {need}")
    return {**out, "ours": text if results else "", "verdict": verdict, "notes": notes, **hidden}


PAIRED_TEST = "exact paired sign-flip permutation test of the mean difference, one-sided"
PAIRED_ALPHA = 0.05
PAIRED_INTRO = (f"The claim \"TPO lowest\" as paired comparisons of our runs: at each H, TPO "
                f"against each method on the seeds both ran (a seed fixes the initial weights "
                f"and the prompts), by an {PAIRED_TEST} (H1: TPO's final error is lower); "
                f"\"not significant\" at p ≥ {PAIRED_ALPHA:g}; no test before the paper's seed count. A reading, not a verdict: the "
                f"claim's verdict above compares seed means.")
PAIRED_OTHERS = ("grpo", "grpo_no_kl", "ppo", "dg")


def per_seed_final(rows: pd.DataFrame) -> dict[int, float]:
    """seed -> final error (%) at the last step every seed of the configuration logged."""
    wide = stats.seed_curves(rows) if not rows.empty else pd.DataFrame()
    if wide.empty:
        return {}
    return {int(k): 100 * float(v) for k, v in wide.iloc[-1].items()}


def paired_comparison(ours: dict[int, float], other: dict[int, float]) -> dict | None:
    """TPO's final errors against another method's on the seeds both ran (a seed fixes the
    initial weights and the prompts): n, both means, and the one-sided p that TPO's is
    lower (stats.paired_sign_flip_test); None without a shared seed."""
    seeds = sorted(set(ours) & set(other))
    if not seeds:
        return None
    a, b = [ours[s] for s in seeds], [other[s] for s in seeds]
    return {"n": len(seeds), "a": float(np.mean(a)), "b": float(np.mean(b)),
            "p": stats.paired_sign_flip_test(a, b)}


def paired_reading(c: dict) -> str:
    if c["p"] < PAIRED_ALPHA:
        return f"TPO lower, p = {c['p']:.2g} at {c['n']} seeds"
    return f"not significant at {c['n']} seeds (p = {c['p']:.2g})"


def paired_lines(row, sel: pd.DataFrame) -> list[dict]:
    """An ordering claim "tpo < others" over H (the terminal table's), as paired tests of
    our runs: at each H with runs, TPO against each other method on their shared seeds,
    tested only once they share the paper's seed count (no interim test)."""
    if sel.empty or row["value"].split("<")[0].strip() != "tpo" or row["over"] != "H":
        return []
    out, need = [], int(row["seeds"])
    for h in sorted(sel["task.sequence_length"].dropna().unique()):
        quals = {"H": int(h)}
        tpo = per_seed_final(config_rows(sel, row, "tpo", quals))
        for algo in PAIRED_OTHERS:
            c = paired_comparison(tpo, per_seed_final(config_rows(sel, row, algo, quals)))
            if c is None:
                continue
            full = c["n"] >= need  # fixed N: no test on a cell until both have every seed
            out.append({"comparison": f"tpo < {algo}", "match": row["match"], "H": str(int(h)),
                        "paired seeds": str(c["n"]), "TPO final error %": number_text(c["a"]),
                        "other's %": number_text(c["b"]), "p (one-sided)": f"{c['p']:.2g}" if full else "",
                        "reading": paired_reading(c) if full else f"{c['n']} of {need} seeds: no test until {need}"})
    return out


REGISTERED_EXPERIMENT = "terminal_h_sweep"  # the section whose prompt-matched claim they test
REGISTERED_HEAD = "### The registered test: TPO against"
COMBINED = "**The claim over both registered tests:"


@dataclass(frozen=True)
class Registered:
    """A registered analysis of the central claim: its code, its registration, the method
    TPO is tested against, and what was in view when it was registered."""
    code: object  # the module: HORIZONS, SEEDS, SEEN, ALPHA, judge
    registration: rule_dates.Registration
    other: str  # the algo TPO is paired with
    not_blind: str  # which tests saw their data before the registration


REGISTERED = (
    Registered(registered, rule_dates.TERMINAL_H_SWEEP, "grpo",
               "H = 10's runs were complete and seen when it was registered, so its test is not blind"),
    Registered(registered_ppo, rule_dates.TERMINAL_PPO, "ppo",
               "TPO's seeds 0–8 were run when it was registered, so neither H's test is blind on "
               "TPO's side"),
)


def pct(p: float) -> str:
    """A p-value as printed: two significant digits, '< 0.0001' below that."""
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def registered_finals(reg: Registered, row, sel: pd.DataFrame) -> dict:
    """H -> (TPO's, the other's) {seed: final error %} for a registered analysis: the runs
    the claim row (terminal table, prompt-matched) is judged on, per H."""
    return {h: tuple(per_seed_final(config_rows(sel, row, algo, {"H": h})) for algo in ("tpo", reg.other))
            for h in reg.code.HORIZONS}


def seen_text(reg: Registered, h: int) -> str:
    """The seeds whose results were in view at registration, at one H."""
    def span(r):
        return f"seeds 0–{len(r) - 1}" if len(r) else "none"
    seen = reg.code.SEEN
    if all(isinstance(v, dict) for v in seen.values()):  # per method
        return ", ".join(f"{algo.upper()} {span(by.get(h, ()))}" for algo, by in seen.items())
    return span(seen.get(h, ()))


FIXED = "Already fixed by"
OUT_OF_REACH = '"supported" is out of reach'
ASSURED = '"contradicted" is assured'
OVER_BOTH = "and with it the claim over both tests"


def p_beside(q: float, bound: float) -> str:
    """A p-value with the fewest digits (two at least) that keep its side of the bound it is
    compared with and do not round it to 1."""
    for digits in range(2, 9):
        t = f"{q:.{digits}g}"
        if (float(t) > bound, float(t) < bound) == (q > bound, q < bound) and (float(t) < 1 or q >= 1):
            return t
    return repr(q)


def fixed_text(reg: Registered, outcome) -> str:
    """What the complete H settle while others are not: Holm's adjusted p is never below the
    raw p, so a raw p above α never passes; a raw p at or below α / (number of H) passes
    whatever the other H give. Empty before the first and after the last H is complete."""
    code, other = reg.code, reg.other.upper()
    if not outcome.cells or len(outcome.cells) == len(code.HORIZONS):
        return ""
    a, m = code.ALPHA, len(code.HORIZONS)
    strict = a / m
    said, cannot_tpo, sure_other = [], False, False
    for h, c in sorted(outcome.cells.items()):
        p = {"TPO": c.p_tpo_lower, other: getattr(c, f"p_{reg.other}_lower")}
        tpo_out = p["TPO"] > a  # as Outcome.reading: the other direction only where TPO's fails
        if all(q > a for q in p.values()):
            said.append(f"H = {h} reads \"not separated\": neither direction's raw p is at or below "
                        f"α = {a:g} (TPO lower {p_beside(p['TPO'], a)}, {other} lower {p_beside(p[other], a)})")
        else:
            for who, q in p.items():
                if q > a:
                    said.append(f"at H = {h}, {who} cannot read lower (raw p {p_beside(q, a)} > α = {a:g})")
                elif q <= strict and (who == "TPO" or tpo_out):
                    said.append(f"H = {h} reads \"{who} lower\" (raw p {p_beside(q, strict)} ≤ α / {m} = {strict:g})")
        cannot_tpo |= tpo_out
        sure_other |= tpo_out and p[other] <= strict
    if not said:
        return ""
    then = ASSURED if sure_other else OUT_OF_REACH if cannot_tpo else ""  # the stronger one
    hs = ", ".join(map(str, sorted(outcome.cells)))
    return (f"{FIXED} H = {hs} (all {len(code.SEEDS)} seeds), whatever the other H give (Holm never lowers "
            f"a p, and a raw p at or below α / {m} passes Holm whatever the others are): "
            + "; ".join(said) + "." + (f" So against {other}, {OVER_BOTH}, {then}." if then else ""))


def registered_block(reg: Registered, outcome) -> list[str]:
    """A registered analysis's outcome, beside the registration's commit and date."""
    r, code, other = reg.registration, reg.code, reg.other.upper()
    n, n_h = len(code.SEEDS), len(code.HORIZONS)
    p_tpo, p_other = "p TPO lower (Holm)", f"p {other} lower (Holm)"
    rows = []
    for h in code.HORIZONS:
        c = outcome.cells.get(h)
        row = {"H": str(h), "seeds run (of 20)": str(outcome.seeds_run[h]),
               "seen before registration": seen_text(reg, h)}
        if c is None:
            row.update({"TPO %": "", f"{other} %": "", p_tpo: "", p_other: "",
                        f"signed-rank p TPO / {other} lower": ""})
        else:
            holm = lambda d: f" ({pct(d[h])})" if h in d else " (Holm pending)"  # noqa: E731
            theirs = getattr(c, reg.other)  # each module's Cell and Outcome name the other method
            row.update({"TPO %": number_text(float(np.mean(c.tpo))), f"{other} %": number_text(float(np.mean(theirs))),
                        p_tpo: pct(c.p_tpo_lower) + holm(outcome.holm_tpo_lower),
                        p_other: pct(getattr(c, f"p_{reg.other}_lower")) + holm(getattr(outcome, f"holm_{reg.other}_lower")),
                        f"signed-rank p TPO / {other} lower":
                            f"{pct(c.rank_p_tpo_lower)} / {pct(getattr(c, f'rank_p_{reg.other}_lower'))}"})
        row["reading"] = outcome.reading(h)
        rows.append(row)
    pooled = outcome.pooled_reading()
    if outcome.pooled is not None:
        q = outcome.pooled
        pooled += (f" (p TPO lower {pct(q['p_tpo_lower'])}, {other} lower {pct(q[f'p_{reg.other}_lower'])}; "
                   f"signed-rank {pct(q['rank_p_tpo_lower'])} / {pct(q[f'rank_p_{reg.other}_lower'])}; "
                   f"not blind: {reg.not_blind})")
    hs = ", ".join(map(str, code.HORIZONS[:-1])) + f" and {code.HORIZONS[-1]}"
    return [f"{REGISTERED_HEAD} {other}", "",
            f"Registered in `{r.commit}` on {r.date[:16].replace('T', ' ')} UTC, before its "
            f"new runs (`{r.files[0]}`, code `{r.files[1]}`): per H = {hs}, an exact one-sided "
            f"paired sign-flip test over seeds 0–{n - 1}, Holm over the {n_h} H at "
            f"α = {code.ALPHA:g} per direction; no test until both methods have all {n} seeds at "
            f"an H. A p-value reads raw, with Holm's adjusted value beside it once every H is "
            f"complete. {reg.not_blind}.", "",
            md_table(rows), "",
            f"**The claim \"TPO attains the lowest error at each H\", against {other} (H = {hs}): "
            f"{outcome.claim()}.** Pooled: {pooled}.", ""] + ([fixed, ""] if (fixed := fixed_text(reg, outcome)) else [])


def registered_section(outcomes: list) -> list[str]:
    """Each registered analysis's block, then the claim over them (registered_ppo.combined)."""
    text = [line for reg, o in zip(REGISTERED, outcomes) for line in registered_block(reg, o)]
    return text + [f"{COMBINED} {registered_ppo.combined(*(o.claim() for o in outcomes))}.**", ""]


def run_provenance(df: pd.DataFrame, legacy_runs: set, roots: list[Path]) -> dict:
    """(config hash, seed) -> what each run was recorded under: "legacy" (a hash with the
    preset names, re-keyed), "commits" (git commits, [] unrecorded) and "kernels" (CPU
    instruction sets of its attempts, "not recorded" where an attempt predates the field),
    from the table and each run's summary.json under roots."""
    df = df if "git_commits" in df.columns else df.assign(git_commits=None)  # older tables
    runs = df[["task.name", "algo.name", "config_hash", "seed", "git_commits"]].drop_duplicates(
        ["config_hash", "seed"])
    out = {}
    for t, a, h, s, commits in runs.itertuples(index=False):
        summary = {}
        for root in roots:
            path = schema.run_dir(root, str(t), str(a), str(h), int(s)) / schema.SUMMARY
            try:
                summary = json.loads(path.read_text())
                break
            except (OSError, ValueError):
                pass
        listed = summary.get("git_commits") or (str(commits).split(";") if isinstance(commits, str) else [])
        attempts = summary.get("attempts_log") or [{}]
        kernels = sorted({x.get("cpu_kernels") or "not recorded" for x in attempts})
        starts = [x["started_at"] for x in attempts if x.get("started_at") is not None]
        out[(str(h), int(s))] = {"started": min(starts) if starts else None,
                                 "legacy": (str(h), int(s)) in legacy_runs
                                 or bool(summary.get("legacy_config_hash")),
                                 "commits": [c for c in listed if c and c != "unknown"],
                                 "kernels": " + ".join(kernels)}
    return out


def seed_list(seeds) -> str:
    """0, 1, 2, 5 -> '0–2, 5'."""
    seeds, parts = sorted(set(seeds)), []
    for s in seeds:
        if parts and s == parts[-1][1] + 1:
            parts[-1][1] = s
        else:
            parts.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in parts)


def provenance_text(runs: frozenset, prov: dict) -> str:
    """A row's runs by what they were recorded under, so no pooling goes unmarked: seeds
    under legacy hashes, under a -dirty commit, with no commit recorded, and per CPU
    kernel set."""
    info = {r: prov[r] for r in runs if r in prov}
    if not info:
        return ""
    groups = {"legacy hash": [s for (_, s), i in info.items() if i["legacy"]],
              "-dirty commit": [s for (_, s), i in info.items()
                                if any(c.endswith("-dirty") for c in i["commits"])],
              "commit not recorded": [s for (_, s), i in info.items() if not i["commits"]]}
    parts = [f"{k}: seeds {seed_list(v)}" for k, v in groups.items() if v]
    kernels: dict[str, list] = {}
    for (_, s), i in info.items():
        kernels.setdefault(i["kernels"], []).append(s)
    parts.append("CPU kernels: " + "; ".join(f"{k} (seeds {seed_list(v)})"
                                             for k, v in sorted(kernels.items())))
    return "; ".join(parts)


def hardware(sel: pd.DataFrame, runs_root: Path | None, given: str | None) -> str:
    """Device, threads and torch version from the runs' summary.json files."""
    found = []
    if runs_root is not None and runs_root.is_dir():
        runs = sel[["task.name", "algo.name", "config_hash", "seed"]].drop_duplicates()
        for t, a, h, s in runs.itertuples(index=False):
            path = schema.run_dir(runs_root, str(t), str(a), str(h), int(s)) / schema.SUMMARY
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                pass
    parts = [given] if given else []
    if found:
        kinds = sorted({f"{s.get('device', '?')}, {s.get('threads', '?')} threads, torch "
                        f"{(s.get('versions') or {}).get('torch', '?')}" for s in found})
        # training time: each run's last row's wall_s (resumes add up, pauses between them do not)
        walls = [float(s["final"]["wall_s"]) for s in found if "wall_s" in (s.get("final") or {})]
        timed = f", {sum(walls) / 3600:.2f} h of training summed over {len(walls)} of them" if walls else ""
        parts.append(f"{'; '.join(kinds)} ({len(found)} summary.json{timed})")
    return "; ".join(parts) or "see each run's summary.json"


def split_lines(sel: pd.DataFrame) -> list[dict]:
    """Runs scored on a validation split also log the test-file error of the same models:
    one line per algorithm with both final errors, so the two image sets are compared on
    identical networks."""
    if "task.holdout" not in sel.columns or "test_error" not in sel.columns:
        return []
    held = sel[sel["task.holdout"].fillna(0) > 0]
    lines = []
    for algo, g in held.groupby("algo.name", sort=True):
        g = pick_config(g)
        val = stats.final_stats(stats.seed_curves(g, "error"))
        test = stats.final_stats(stats.seed_curves(g, "test_error"))
        if val is None or test is None:
            continue
        diff = stats.final_stats(stats.seed_curves(g.assign(d=g["test_error"] - g["error"]), "d"))
        lines.append({"algorithm": algo, "seeds": str(val.n_seeds),
                      "validation split (10k training images held out) %": f"{100 * val.mean:.2f} ± {100 * val.se:.2f}",
                      "test file %": f"{100 * test.mean:.2f} ± {100 * test.se:.2f}",
                      "test − validation, same models (pts)": f"{100 * diff.mean:+.2f} ± {100 * diff.se:.2f}"})
    return lines


def flag_post_hoc(numbers: list[dict], claims: list[dict], section: str, sel, prov: dict) -> None:
    """Adds to each row the rules (rule_dates.RULES) that took effect after its runs had
    started: a number row's own runs, a claim's the section's."""
    everything = run_ids(sel) if not sel.empty else frozenset()
    for l in numbers + claims:
        runs = l["_runs"] if "_runs" in l else everything
        started = [prov[r]["started"] for r in runs if r in prov]
        l["rules set after its runs"] = rule_dates.flag(rule_dates.post_hoc(l, section, started))


def md_table(lines: list[dict]) -> str:
    cols = [c for c in lines[0] if not c.startswith("_")]
    esc = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows += ["| " + " | ".join(esc(l[c]) for c in cols) + " |" for l in lines]
    return "\n".join(rows)


def margin_rows() -> list[dict]:
    """The declared margins, each with the reasoning it was derived by."""
    return [{"family": f"`{name}`", "δ": (f"× {m.delta:g}" if m.scale == "ratio" else f"± {m.delta:g}"),
             "derived from the paper's numbers": m.why} for name, m in V.MARGINS.items()]


def margins_table() -> str:
    return "Margins (`verdicts.MARGINS`; the family of each row is a column of `paper_numbers.csv`):\n\n" \
        + md_table(margin_rows())


def rule_log(parts: list[dict]) -> str:
    """The rules in force with the date each took effect, and how many verdicts each
    judged post hoc (after runs of the row existed), from the rows' flags."""
    rows = [l for p in parts for l in p["lines"] if not l.get("_repeat_of")
            and not l.get("_formula") and "rules set after its runs" in l
            and verdict_kind(l["verdict"]) not in (V.NOT_RUN, V.NEEDS_GPU)]
    flagged = [l for l in rows if l["rules set after its runs"]]
    table = rule_dates.table()
    for t in table:
        t["verdicts judged post hoc"] = str(sum(f" {t['commit']}" in f" {l['rules set after its runs']}"
                                                for l in flagged))
    return "\n".join([
        "### Rule log", "",
        "Every rule the verdicts depend on, with the commit and date it took effect "
        "(`analysis/paper/rule_dates.py`) and the verdicts it moved on the committed data "
        "(`python analysis/paper/rule_log.py COMMIT --add-runs reproduction/runs/terminal`; "
        "each commit's message lists them). A verdict is *post hoc* for a rule that took "
        "effect after its runs had started, so the rule may have been chosen with them in "
        "view; each table's column `rules set after its runs` names those rules. "
        f"Of {len(rows)} verdicts on runs (each paper number and claim once), {len(flagged)} "
        "are post hoc for at least one rule.", "", md_table(table)])


def _seed_span(values) -> str:
    values = sorted(set(values))
    if not values:
        return "—"
    return str(values[0]) if values[0] == values[-1] else f"{values[0]}–{values[-1]}"


def mark_repeats(lines: list[dict], section: str, first: dict) -> None:
    """A row whose paper number or claim an earlier row already judges is a repeat: shown
    in its table with a note, counted only where it first appears. first: paper key ->
    section, filled in counting order (counting_order)."""
    for l in lines:
        if l["_key"] in first:
            l["_repeat_of"] = first[l["_key"]]
            l["notes"] = "; ".join(filter(None, [l["notes"], f"repeats a row of `{first[l['_key']]}`: "
                                                 "the summary counts it there"]))
        else:
            first[l["_key"]] = section


def summarise(parts: list[dict], table_runs: frozenset = frozenset()) -> tuple[list[dict], list[str]]:
    """The summary: every paper number and claim counted once, in the section that judges it
    first in counting order (mark_repeats, counting_order), and every run once, in the first section with paper numbers
    that uses it. parts: per section, in report order, {"name", "lines" (number and claim
    rows of number_line / ordering_line), "runs" (its run ids)}. Returns the table and the
    lines of text under it."""
    owner = {}
    # hero and diagnostics only draw other sections' runs: count a run where it is judged
    order = sorted(parts, key=lambda p: not p["lines"])
    for part in order:
        for run in part["runs"]:
            owner.setdefault(run, part["name"])
    table, judged = [], []
    for part in parts:
        first = [l for l in part["lines"] if not l.get("_repeat_of")]
        numbers = [l for l in first if "algorithm" in l]
        runs_based = [l for l in first if not l["_formula"]]
        judged += [l for l in numbers if not l["_formula"] and l["_runs"]]
        kinds = pd.Series([verdict_kind(l["verdict"]) for l in runs_based], dtype=object).value_counts()
        ran = [l for l in part["lines"] if "algorithm" in l and not l["_formula"] and l["_n"]]
        table.append({
            "result": f"`{part['name']}`",
            "paper numbers": str(len(numbers)), "claims": str(len(first) - len(numbers)),
            "repeats": str(len(part["lines"]) - len(first)),
            "runs": str(len(part["runs"])) if part["runs"] else "—",
            "runs counted here": str(sum(owner[r] == part["name"] for r in part["runs"])),
            "our seeds": _seed_span(l["_n"] for l in ran),
            "paper's seeds": _seed_span(l["_paper_seeds"] for l in part["lines"]
                                        if "algorithm" in l and l["_paper_seeds"]),
            "below paper's seeds": str(sum(l["_below"] for l in numbers if not l["_formula"])),
            V.FORMULA: str(sum(l["_formula"] for l in numbers)),
            **{v: str(kinds.get(v, 0)) for v in VERDICT_ORDER}})
    total = {"result": "**total, each once**"}
    for col in list(table[0])[1:]:
        if col == "runs":  # a sum of what sections use counts shared runs again
            total[col] = "—"
        elif col in ("our seeds", "paper's seeds"):
            spans = [t[col] for t in table if t[col] != "—"]
            ends = [int(x) for span in spans for x in span.split("–")]
            total[col] = _seed_span(ends)
        else:
            total[col] = str(sum(int(t[col]) for t in table if t[col] != "—"))
    table.append(total)

    by_runs = Counter(l["_runs"] for l in judged)
    shared = [l for l in judged if by_runs[l["_runs"]] > 1]
    widest = max(by_runs, key=lambda r: (by_runs[r], len(r)), default=None)
    example = "; ".join(f"{l['algorithm']} {l['paper']} ({l['citation']})"
                        for l in judged if l["_runs"] == widest)
    kinds = {k: total[k] for k in VERDICT_ORDER if total[k] != "0"}
    below = total["below paper's seeds"]
    text = [
        f"Counted once: {total['paper numbers']} paper numbers ({total[V.FORMULA]} of them "
        f"*formula checks*, computed from science §Tabular bandits's formulas, not from runs, and counted apart "
        f"from the run-based verdicts) and {total['claims']} claims. {total['repeats']} rows "
        "repeat a number or claim an earlier section already judges (`mnist_holdout` "
        "re-judges `mnist`'s on a validation split; tables that reprint a value for the same "
        "configuration); each section's table shows them, the counts here do not.",
        f"Runs: {total['runs counted here']} distinct (config hash, seed) runs, each counted "
        "in the first section with paper numbers that uses it (`runs` is what a section uses, "
        "shared runs included)" + (f"; the results table holds {len(table_runs)}, the rest "
                                   "being runs no paper section selects (probes, tuning trials, "
                                   "other learning rates)"
                                   if len(table_runs) > int(total["runs counted here"]) else "") + ".",
        "Verdicts, each paper number and claim once: " + ", ".join(f"{v} {k}" for k, v in kinds.items())
        + f"; formula checks apart: {total[V.FORMULA]}. {below} run-based "
        "number rows have fewer seeds than the paper (marked `n (< paper's)` in their table; "
        "under 5 seeds no verdict is claimed).",
    ]
    if shared:
        per_set = {}
        for l in judged:
            per_set.setdefault(l["_runs"], set()).add(verdict_kind(l["verdict"]))
        by_set = Counter(k for kinds_ in per_set.values() for k in kinds_)
        text.append("The same verdicts on paper numbers counted once per set of runs (one "
                    "configuration judged against several printed values, e.g. a prompt- and "
                    "an interaction-matched row, counts once per verdict it gets): "
                    + ", ".join(f"{by_set[k]} {k}" for k in VERDICT_ORDER if by_set[k]) + ".")
        text.append(f"{len(shared)} of the {len(judged)} run-based verdicts on paper numbers "
                    f"share their runs with another (one configuration judged against several "
                    f"printed values): they rest on {len(by_runs)} distinct sets of runs. The "
                    f"most shared: {example}.")
    return table, text


class NothingToReport(ValueError):
    """The results table has no run that any paper number or claim is judged on."""


class Progress:
    """Brief lines on stderr, with the seconds since the start: a report on the full table
    takes minutes, and a silent terminal looks hung."""

    def __init__(self, quiet: bool = False):
        self.start, self.quiet = time.monotonic(), quiet
        self.last = self.start

    def __call__(self, what: str, every: float = 0) -> None:
        """every: a line inside a long step, shown only after that many silent seconds."""
        now = time.monotonic()
        if self.quiet or now - self.last < every:
            return
        self.last = now
        print(f"report: {what} [{now - self.start:.1f} s]", file=sys.stderr, flush=True)


def counting_order(experiments: dict) -> list[tuple]:
    """(name, experiment) in the order the summary counts their rows (mark_repeats): report
    order, but a section with `counted_before` set just before the section it names."""
    order = [n for n in experiments if not experiments[n].counted_before]
    for n, e in experiments.items():
        if e.counted_before:
            order.insert(order.index(e.counted_before), n)
    return [(n, experiments[n]) for n in order]


def seed_figure_groups(sections, paper_seeds: dict) -> dict:
    """The per-seed figure's panels: each configuration whose paper seeds are known, from its
    first row (prompt-matched) over (section, number lines) in order -> (section, SeedGroup).
    Drawn once from all sections, so the one file is the same whoever draws it."""
    groups = {}
    for name, lines in sections:
        for l in lines:
            if l["_group"] in paper_seeds and l["_per_seed"] and l["_group"] not in groups:
                groups[l["_group"]] = (name, figures.SeedGroup(l["algorithm"], l["_per_seed"],
                                                               paper_seeds[l["_group"]]))
    return dict(sorted(groups.items()))  # panels in one order, whichever section comes first


def judged_anything(lines: list[dict]) -> bool:
    """Whether some number row has runs (formula checks need none) or some claim found any."""
    return any((l["_runs"] if "algorithm" in l else l["ours"]) for l in lines)


def build(df: pd.DataFrame, out: Path, fig_dir: Path, runs_root: Path | None = None,
          given_hw: str | None = None, source: str = "", paper: pd.DataFrame | None = None,
          findings: str = "", progress=None, provenance: dict | None = None) -> str:
    """The report's text; draws its figures into fig_dir. NothingToReport, before anything
    is drawn, when no row of df is judged against a paper number or claim."""
    progress = progress or (lambda what, every=0: None)
    paper = load_paper() if paper is None else paper
    paper_seeds = load_paper_seeds()
    progress(f"verdicts: {len(paper)} paper rows in {len(EXPERIMENTS)} sections")
    judged, first, outcome = [], {}, None
    for i, (name, exp) in enumerate(counting_order(EXPERIMENTS)):
        progress(f"verdicts: section {i + 1} of {len(EXPERIMENTS)} ({name})", every=30)
        sel = experiments.select(df, name) if not df.empty else df
        rows = paper[paper["experiment"] == name]
        numbers = [number_line(r, sel, paper_seeds, provenance)
                   for _, r in rows[rows["kind"] == "number"].iterrows()]
        claims = [ordering_line(r, sel) for _, r in rows[rows["kind"] == "ordering"].iterrows()]
        mark_repeats(numbers + claims, name, first)
        if provenance is not None:
            flag_post_hoc(numbers, claims, name, sel, provenance)
        paired = [l for _, r in rows[rows["kind"] == "ordering"].iterrows() for l in paired_lines(r, sel)]
        claim_rows = rows[(rows["kind"] == "ordering") & (rows["match"] == "prompts")]
        if name == REGISTERED_EXPERIMENT and not claim_rows.empty:
            outcome = [reg.code.judge(registered_finals(reg, claim_rows.iloc[0], sel) if not sel.empty else {})
                       for reg in REGISTERED]
        judged.append((name, exp, sel, numbers, claims, paired))
    judged.sort(key=lambda j: list(EXPERIMENTS).index(j[0]))  # back in report order
    if not any(judged_anything(numbers + claims) for *_, numbers, claims, _ in judged):
        raise NothingToReport("no row of the results table matches any paper number or claim "
                              "(analysis/paper/paper_numbers.csv)")
    n_figures = sum((name in figures.FIGURES or name in paper_figures.PAPER) and not sel.empty
                    for name, _, sel, *_ in judged)
    progress(f"drawing {n_figures} figure{'s' * (n_figures != 1)} into {fig_dir}")
    seed_groups = seed_figure_groups(((name, numbers) for name, _, _, numbers, *_ in judged), paper_seeds)
    seeds_png = (figures.draw_seed_distributions([g for _, g in seed_groups.values()], SEEDS_TITLE,
                                                 fig_dir)[0] if seed_groups else None)
    sections, parts = [], []
    for name, exp, sel, numbers, claims, paired in judged:
        text = [f"## {exp.title} (`{name}`)", ""]
        if sel.empty:
            text += [f"Not run yet: no results for this experiment ({experiments.how_to_run(name)}).", ""]
        else:
            n_runs = len(sel[["config_hash", "seed"]].drop_duplicates())
            seeds = sel.groupby("config_hash")["seed"].nunique()
            span = V.seeds(seeds.min()) if seeds.min() == seeds.max() else f"{seeds.min()}–{seeds.max()} seeds"
            text += [f"Runs: {n_runs} ({len(seeds)} configurations, {span} each). "
                     f"Hardware: {hardware(sel, runs_root, given_hw)}.", ""]
            if name in paper_figures.PAPER:  # the paper's form, then its companion
                for png in paper_figures.draw(name, df, fig_dir)[::2]:
                    text += [f"![{png.stem}]({Path(os.path.relpath(png, out.parent)).as_posix()})", ""]
            elif name in figures.FIGURES:
                try:
                    png = figures.draw(name, df, fig_dir)[0]
                    text += [f"![{name}]({Path(os.path.relpath(png, out.parent)).as_posix()})", ""]
                except figures.NoData as e:
                    text += [f"(No figure: {e}.)", ""]
        if numbers:
            text += [md_table(numbers), ""]
        if name in {section for section, _ in seed_groups.values()}:
            text += [SEEDS_CAPTION, "",
                     f"![{figures.SEEDS_FIGURE}]({Path(os.path.relpath(seeds_png, out.parent)).as_posix()})", ""]
        if claims:
            text += ["Claims:", "", md_table(claims), ""]
        if name == REGISTERED_EXPERIMENT and outcome is not None:
            text += registered_section(outcome)
        if paired:
            text += [PAIRED_INTRO, "", md_table(paired), ""]
        split = split_lines(sel) if not sel.empty else []
        if split:
            text += ["Final error of the same networks on the validation split and on the "
                     "test file:", "", md_table(split), ""]
        if not numbers and not claims:
            text += [exp.note or "The paper gives no numbers of its own for this figure.", ""]
        sections.append("\n".join(text))
        parts.append({"name": name, "lines": numbers + claims,
                      "runs": frozenset() if sel.empty else run_ids(sel)})
    summary, summary_text = summarise(parts, frozenset() if df.empty else run_ids(df))
    tuned_lines = tuned.lines(df)  # only when `<algo>_tuned` runs exist
    if tuned_lines:
        sections.append("\n".join(["## Tuned beside untuned (`tuned_terminal`)", "", tuned.NOTE,
                                   "", md_table(tuned_lines), ""]))
    head = ["# Reproduction report: Target Policy Optimization (Kaddour 2026)", "",
            f"Generated by `python analysis/paper/report.py` from {source or 'the results table'} "
            f"({len(df)} rows). Do not edit by hand: regenerate it.", "",
            "## How the verdicts are computed", "", V.rules(paper_seeds), margins_table(), "", "## Summary", "",
            md_table(summary), "", *[t + "\n" for t in summary_text]]
    if provenance is not None:
        head += [rule_log(parts), ""]
    if findings:  # hand-written: why a verdict differs, with the evidence and commands
        head += [findings.strip(), ""]
    return "\n".join(head + sections)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=collect.DEFAULT_OUT, help="table from analysis/collect.py")
    # Not the committed reproduction/REPRODUCTION.md: a report on your own runs must not
    # overwrite the reproduction's (regenerate that one with the explicit command in
    # reproduction/README.md).
    parser.add_argument("--out", default=f"{collect.DEFAULT_ROOT}/REPRODUCTION.md", help="the report to write")
    parser.add_argument("--figures", default=None, help="figure folder (default: <out folder>/figures)")
    parser.add_argument("--runs", default=None, help="output root holding the runs' summary.json "
                                                     "(default: the results file's folder)")
    parser.add_argument("--hardware", default=None, help="hardware description to print beside the seeds")
    parser.add_argument("--findings", default=None,
                        help="markdown inserted after the summary: the differences chased down, "
                             "with evidence (default: findings.md beside --out, if any: "
                             "reproduction/findings.md for the committed report)")
    parser.add_argument("--add-runs", action="append", default=[], metavar="ROOT",
                        help="also the completed runs under this output root, each replacing "
                             "its copy in the table if any (repeatable): new runs reach the "
                             "report without rewriting a committed table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)

    results, out = Path(args.results), Path(args.out)
    fig_dir = Path(args.figures) if args.figures else out.parent / "figures"
    runs = Path(args.runs) if args.runs else results.parent
    findings = Path(args.findings) if args.findings else out.parent / "findings.md"
    if args.findings and not findings.is_file():
        print(f"error: --findings {findings}: no such file", file=sys.stderr)
        return 2
    say = Progress(args.quiet)
    legacy_runs: set = set()
    df = collect.read_results(results, "nothing to report", say, legacy_runs=legacy_runs)
    if isinstance(df, int):
        return df
    source = f"`{results}`"
    for root in map(Path, args.add_runs):
        if not root.is_dir():
            print(f"error: --add-runs {root}: no such folder", file=sys.stderr)
            return 2
        added, skipped = collect.collect(root)
        replaced = []
        if not added.empty:
            df, replaced = collect.merge(df, added)
            legacy_runs.difference_update((str(h), int(s)) for h, s in replaced)
            source += f" and the completed runs under `{root.as_posix()}`"
        n_added = 0 if added.empty else added.groupby(["config_hash", "seed"]).ngroups
        say(f"added {n_added} completed run(s) from {root} ({len(replaced)} replacing the "
            f"table's copy; {len(skipped)} not completed or skipped, left out)")
    roots = [runs, *map(Path, args.add_runs)]
    provenance = run_provenance(df, legacy_runs, [r for r in roots if r.is_dir()])
    try:
        text = build(df, out, fig_dir, runs, args.hardware, source,
                     findings=findings.read_text() if findings.is_file() else "", progress=say,
                     provenance=provenance)
    except NothingToReport as e:
        print(f"error: {results}: {e}; nothing written", file=sys.stderr)
        return 2
    io.write_text(out, text)
    say(f"wrote {out}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
