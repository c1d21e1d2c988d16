"""The verdict rules of the reproduction report (reproduction/REPRODUCTION.md): one
function per rule, and rules(), their wording for the report (kept beside the code so the
two cannot drift apart).

Inputs are our statistics (seed mean and its 90 % Student-t interval for a final error,
a 90 % bootstrap interval over seeds for steps to a threshold), the paper's value as
printed in paper_numbers.csv beside this file and, where they are known, the paper's
per-seed values (paper_seeds.csv). No verdict is ever typed by hand.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

import numpy as np

from .. import stats

REPRODUCED, INCONCLUSIVE, DIFFERS = "reproduced", "inconclusive", "differs"
# Neither shown close nor shown different: our interval reaches past the margin and also
# covers the paper's value, so the data cannot tell a match from a miss yet.
NOT_DISTINGUISHABLE = "not distinguishable"
# A row the paper's own seeds for its configuration cannot pass (another replicate printed
# a value those seeds do not give): no rerun could reproduce it, so it is not judged.
BEYOND = "beyond the paper's own seeds"
OWN_SEEDS_FLOOR = 0.05  # below this share of redraws passing, a row is beyond them
OWN_SEEDS_DRAWS = 1000
HOLDS, FAILS = "holds", "fails"
TOO_SHORT, NOT_RUN = "run too short", "not run yet"
FORMULA = "formula check"
NEEDS_GPU = "needs weights and a GPU"
NEVER = ("—", "-", "never")
# Families no rule judges: their rows need what this project has not had. They are listed
# with their status, never judged (and no margin is declared for them); judging one would
# first need its margin declared, a rule change.
UNJUDGED = {
    "llm_rlvr": NEEDS_GPU,  # science §Language models: pretrained 1.5-1.7B models (weights) on GPUs
}
RANGE = re.compile(r"^~?(\d+(?:\.\d+)?)\s*[–-]\s*(\d+(?:\.\d+)?)$")

LEVEL = 0.90  # two one-sided tests at 5 % each: the 90 % two-sided interval
# Fewest seeds a verdict is claimed at, from the paper's own 20 per-seed errors (TPO and
# GRPO, terminal reward, H = 10; tests/test_power.py): from 5 seeds on, k of GRPO's seeds
# "reproduce" TPO's row at most 0.1 % of the time, TPO's never GRPO's, and k of either's
# seeds "differ" from its own row at most 3.6 %; at 4 a correct GRPO "differs" 5.3 %, at 3
# GRPO passes TPO's row 3.1 % and "differs" from its own 9.8 %.
MIN_SEEDS = 5

# Rows whose paper seeds are known (paper_seeds.csv) get a margin no narrower than the
# paper's own replicate noise: the central 90 % of the difference between two independent
# means of as many seeds as the paper ran, z(0.95) x sqrt(2) x SE. A narrower margin could
# not be met by a correct rerun (GRPO's 20 seeds: SE 9.9 pts, so 23.1 pts against the
# family's 11.075); tests/test_power.py shows the pass rates this gives on the paper's seeds.
REPLICATE_Z = 1.6448536269514722


def seeds(n: int) -> str:
    """'1 seed', '3 seeds'."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


def inconclusive(n: int) -> str:
    return f"{INCONCLUSIVE} ({seeds(n)})"


def not_distinguishable(n: int) -> str:
    return f"{NOT_DISTINGUISHABLE} ({seeds(n)})"


_RULES = """\
Verdicts are computed by `analysis/paper/verdicts.py` from the rows of
`analysis/paper/paper_numbers.csv` and our runs; none is typed by hand. A paper value
printed as 6.9 stands for [6.85, 6.95] (half a unit of its last digit, r). Every number
row belongs to a family with an equivalence margin δ (table below, derived from the
paper's printed numbers only; when each rule took effect, and which verdicts it judged on
runs that already existed, is the rule log under the summary); our statistic's interval
is the 90 % two-sided interval, i.e. two one-sided tests at 5 % each (TOST).

- **Labels.** *Reproduced*: our interval lies inside the paper's value ± r ± δ, so it
  is shown to be within the margin (equivalence, not just no detected difference).
  *Differs*: our interval lies entirely outside that range. *Not distinguishable (n
  seeds)*: neither, and our interval also covers the paper's value: the data show neither
  a match nor a miss (more seeds narrow it). *Inconclusive (n seeds)*: neither, and our
  interval misses the paper's value: a difference is shown but not that it exceeds the
  margin; also every row with fewer than {min_seeds} seeds.
- **Final error %** (a seed mean): Student-t interval, mean ± t(0.95, n − 1) × s / √n with
  s the seeds' standard deviation (ddof = 1), against [paper − r − δ, paper + r + δ]. The
  SE shown beside our mean is std(ddof = 0) / √n.
- **Rows whose paper seeds are known** (`analysis/paper/paper_seeds.csv`: terminal-reward TPO
  and GRPO at H = 10, 20 seeds each, and the rows of the same configurations printed from
  another replicate): δ is the family's, widened to the paper's own replicate noise where
  that is larger, {z:.3g} × √2 × the paper's seed SE (the central 90 % of the difference
  between two independent means of its seeds): ± {delta_tpo:.3g} for TPO (the family's),
  ± {delta_grpo:.3g} for GRPO, whose seeds spread from solved to stalled (SE {se_grpo:.2g}
  pts at 20 seeds). The pass rates this gives on redraws of the paper's own seeds, for a
  correct method and for wrong ones (the other method's seeds; TPO's seeds with 3× their
  error), are in `docs/reproducing.md` and asserted by `tests/test_power.py`. A permutation
  test of our seed mean against the paper's seeds is printed as a note, not a way to pass.
- **Steps to a threshold** (the paper's statistic: first step where the seed-mean curve is
  below it): 90 % percentile bootstrap over seeds (10,000 resamples of whole seed curves,
  each keeping its censoring; a resample that never crosses is later than every step).
  With more seeds than the paper, the statistic at the paper's seed count k: the central
  90 % of the crossing over k-seed subsets of ours. *Reproduced* when the interval lies in
  [(paper − r) / δ, (paper + r) × δ]; *differs* when it lies entirely outside; *run too
  short* when our mean never crossed and our runs end before the paper's value; else
  *inconclusive (n seeds)* (also when most resamples never cross within a run that ends
  before (paper + r) × δ).
- **Bound** (">95", "<2.3"): *reproduced* when the whole 90 % t-interval is beyond the
  bound, *differs* when it is entirely on the other side, else *inconclusive (n seeds)*.
- **"—" (never reached)**: the paper's value is "not within the run". *Reproduced* when at
  least 95 % of bootstrap resamples never cross (the interval's lower end is "never");
  *differs* when its upper end is a step before (run length) / δ; else *inconclusive*.
- **Fewer than {min_seeds} seeds**: *inconclusive (n seeds)* whatever the interval says.
  Fed k-seed subsets of the paper's own per-seed errors, the rule must not say
  *reproduced* for GRPO's seeds against TPO's 7.4 % row nor TPO's against GRPO's 50.4 %,
  nor *differs* for either against its own row, more than 5 % of the time from
  {min_seeds} seeds on under the family's margin; at one seed fewer it does
  (`tests/test_power.py`).
- **Formula check** rows (per-context weights) are computed from the science page's formulas, not from
  runs: *reproduced (formula check)* when the formula rounds to the printed value.
- **Ordering claims** ("TPO lowest", "PPO later than DG or never") compare our seed means
  ("never" later than any step), and only on at least {min_seeds} seeds per item, either
  way: with fewer, *inconclusive (n seeds)*, whatever the means say. *Fails* as soon as
  the results so far contradict it: an inequality already violated between items that
  ran, or, for a claim over several settings ("in 7 of 8 variants"), more settings failed
  than the claim can spare. *Holds* only when every item ran and every inequality holds;
  *inconclusive (k of n settings
  run)* for a claim over settings of which too few have run to decide; "a ~ b" holds when
  |a − b| ≤ 2 × max(SE_a, SE_b).
- **A row beyond the paper's own seeds**: where the paper's per-seed values of a row's
  configuration are known, as many of them redrawn with replacement ({draws:,} times) are a
  rerun of its method; if fewer than {floor:.0%} of those redraws pass the row, it printed
  a value its own seeds do not give (another replicate of the same configuration), and it
  reads *{beyond} (k % of their redraws pass)*, not a verdict.
- Notes, not ways to pass: the paper's replicate spread (its values for one configuration
  in different tables) and, where its per-seed values are known and we have fewer seeds
  than it, where our n-seed mean falls among the means of n of its seeds.
- *Not run yet*: no results for that row (for a claim on one setting: not every item
  has run, and those that have do not contradict it).
- *{needs_gpu}*: the paper's LLM results (science §Language models; family `llm_rlvr`), read from its text
  and figure, from pretrained 1.5–1.7B models on GPUs. This project has had neither the
  weights nor a GPU, so they are listed with this status and never judged, whatever runs
  exist: no margin is declared for them (judging them would be a rule change). Their
  presets are `llm_gsm8k` and `llm_graph_color` with `task.model_path`.
"""

@dataclass(frozen=True)
class Margin:
    """An equivalence margin, declared per family of paper numbers before our runs were
    judged with it. scale 'abs': reproduced needs our interval inside paper ± delta (in the
    metric's unit); 'ratio': inside [paper / delta, paper × delta] (steps, whose noise and
    contrasts are multiplicative)."""
    delta: float
    scale: str
    why: str


# How the deltas were chosen (fixed from the paper's numbers alone, paper_numbers.csv):
# an equivalence pass must exclude the alternative the paper sets a number against. Per
# column of a table, the headline contrast is the gap from the row the table is about
# (TPO, TPO_token; masked GRPO) to the nearest other method's printed value (the ratio for
# steps); delta is half the median of those gaps (medians of ratios taken on the log scale) over the table's columns (half on the log
# scale for steps), so an interval inside paper ± delta is at least delta away from the
# typical competitor. tests/test_power.py recomputes each delta from the paper's numbers.
MARGINS = {
    "terminal_error": Margin(11.075, "abs", "half the median TPO-to-nearest-method gap over the 8 "
                             "columns (H = 7..10, both matchings) of the terminal-reward table: "
                             "gaps 5.1, 7.8, 17.7, 20.4, 23.9, 29.7, 30.9, 43.0 pts, median 22.15; "
                             "also the H = 10 ablation's TPO row (same configuration)"),
    "k_sweep_error": Margin(2.62, "abs", "half the median TPO-GRPO gap over K = 4..64 "
                            "(10.5, 14.6, 4.1, 1.8, 5.24 pts)"),
    "epoch_sweep_error": Margin(2.6325, "abs", "half the median TPO-GRPO gap over the epochs "
                                "with numbers on both sides (1: 4.28, 4: 6.25 pts)"),
    "masking_error": Margin(11.7, "abs", "half the gap the masking study headlines, masked GRPO "
                            "29.7 against unmasked 6.3 %"),
    "dg_epochs_error": Margin(23.15, "abs", "half the gap appendix E headlines, DG with 4 epochs "
                              "48.3 against 1 epoch 2.0 %"),
    "vocab_steps": Margin(1.2895, "ratio", "square root of the median ratio of the nearest "
                          "method's steps to TPO_token's over V = 2..16 (3.43, 1.90, 1.20, 1.45: "
                          "median on the log scale 1.66)"),
    "variants_steps": Margin(1.4050, "ratio", "square root of the median ratio of the nearest "
                             "method's steps to TPO_token's over the 8 variants (median 1.97)"),
    "eta_steps": Margin(1.1547, "ratio", "square root of the median ratio between each eta's "
                        "steps and the nearest other eta's (1.07, 1.07, 1.33, 1.47, 1.84: median 1.33)"),
    "eta_error": Margin(0.5, "abs", "the table's final errors (0.0..1.0 %) are not set against "
                        "each other; its claim is convergence to about 1 % or below: half that band"),
    "mnist_error": Margin(1.2, "abs", "half the gap from TPO (2.9 %) to the nearest method, PG (5.3 %)"),
    "mnist_steps": Margin(1.1726, "ratio", "square root of DG's ~2,200 over TPO's ~1,600 steps to 5 %"),
}


@dataclass(frozen=True)
class Paper:
    """A paper value: kind 'number' (value, r), 'bound' (op, value) or 'never'."""
    kind: str
    value: float = math.nan
    r: float = 0.0  # half a unit of the last printed digit
    op: str = ""
    approx: bool = False


def parse_paper(text: str) -> Paper:
    text = str(text).strip().replace(",", "")
    if text in NEVER:
        return Paper("never")
    if m := RANGE.match(text):  # "85–87": its midpoint, r half its width
        lo, hi = float(m.group(1)), float(m.group(2))
        return Paper("number", (lo + hi) / 2, r=(hi - lo) / 2, approx=True)
    if text[0] in "<>":
        return Paper("bound", float(text[1:]), op=text[0])
    approx = text.startswith("~")
    digits = text.lstrip("~")
    if "." in digits:
        r = 0.5 * 10.0 ** -len(digits.split(".")[1])
    else:  # an integer: "~1600" is rounded to its last non-zero digit, "1600" is exact
        zeros = len(digits) - len(digits.rstrip("0")) if approx else 0
        r = 0.5 * 10.0 ** zeros
    return Paper("number", float(digits), r=r, approx=approx)


def _inf(v):
    return math.inf if v is None else v


def equivalence(lo, hi, low, high, n: int, at: tuple = ()) -> str:
    """Our interval [lo, hi] against the paper's margin range [low, high] (TOST).
    at: the paper's own value as an interval (value ± r, or the bound); an interval that
    is neither inside nor outside the margin range but covers it is not distinguishable
    (not shown different, not shown close); one that misses it is inconclusive (a
    difference is shown, but not that it exceeds the margin)."""
    if n < MIN_SEEDS:
        return inconclusive(n)
    if low <= lo and hi <= high:
        return REPRODUCED
    if lo > high or hi < low:
        return DIFFERS
    if at and lo <= at[1] and hi >= at[0]:
        return not_distinguishable(n)
    return inconclusive(n)


def margin_range(paper: Paper, margin: Margin) -> tuple[float, float]:
    if margin.scale == "ratio":
        return (paper.value - paper.r) / margin.delta, (paper.value + paper.r) * margin.delta
    return paper.value - paper.r - margin.delta, paper.value + paper.r + margin.delta


def number_verdict(paper: Paper, margin: Margin, lo: float, hi: float, n: int) -> str:
    """A printed final error against our 90 % t-interval [lo, hi] over n seeds."""
    return equivalence(lo, hi, *margin_range(paper, margin), n,
                       at=(paper.value - paper.r, paper.value + paper.r))


def replicate_margin(margin: Margin, paper_seeds) -> Margin:
    """The family's margin, widened where the paper's per-seed values are known to the
    90 % range of the difference between two means of that many of its seeds: a rerun of
    the paper's own method must be able to pass its row."""
    v = [float(x) for x in paper_seeds]
    if len(v) < 2:
        return margin
    noise = REPLICATE_Z * math.sqrt(2) * statistics.stdev(v) / math.sqrt(len(v))
    if noise <= margin.delta:
        return margin
    return Margin(noise, margin.scale, f"the paper's replicate noise over its {len(v)} seeds")


def own_seeds_pass_rate(paper: Paper, margin: Margin, paper_seeds, draws: int = OWN_SEEDS_DRAWS,
                        seed: int = 0) -> float:
    """How often the paper's own seeds of the row's configuration, as many redrawn with
    replacement (a rerun of its method), are judged reproduced against the row."""
    v = np.asarray(paper_seeds, dtype=float)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        lo, hi = stats.t_interval(v[rng.integers(0, len(v), len(v))], LEVEL)
        hits += number_verdict(paper, margin, lo, hi, len(v)) == REPRODUCED
    return hits / draws


def beyond(rate: float) -> str:
    return f"{BEYOND} ({rate:.0%} of their redraws pass)"


def bound_verdict(paper: Paper, lo: float, hi: float, n: int) -> str:
    at = (paper.value, paper.value)
    if paper.op == ">":
        return equivalence(lo, hi, paper.value, math.inf, n, at)
    return equivalence(lo, hi, -math.inf, paper.value, n, at)


def steps_verdict(paper: Paper, margin: Margin, ours, lo, hi, n: int, last_step) -> str:
    """ours / lo / hi are steps or None (never): the 90 % bootstrap interval of the
    seed-mean crossing."""
    low, high = margin_range(paper, margin)
    if ours is None and last_step is not None and last_step < paper.value - paper.r:
        return TOO_SHORT
    if lo is None and last_step is not None and last_step < high:
        return inconclusive(n)  # "not within our run" cannot tell whether it is beyond high
    return equivalence(_inf(lo), _inf(hi), low, high, n,
                       at=(paper.value - paper.r, paper.value + paper.r))


def never_verdict(margin: Margin, lo, hi, n: int, run_length: int) -> str:
    """Paper: never reached within the run. lo / hi: our interval's ends (None = never)."""
    if n < MIN_SEEDS:
        return inconclusive(n)
    if lo is None:
        return REPRODUCED
    if hi is not None and hi < run_length / margin.delta:
        return DIFFERS
    return inconclusive(n)


def formula_verdict(paper: Paper, value: float) -> str:
    ok = abs(value - paper.value) <= paper.r
    return f"{REPRODUCED if ok else DIFFERS} ({FORMULA})"


def ordering_verdict(left: list, right: list, op: str, n_seeds: int | None = None) -> str:
    """Every left value op every right value; None (never reached) is +infinity. An item
    not run yet is left out: a claim already violated by the items that ran fails.
    n_seeds: the fewest seeds among the items, for the holds-needs-power rule."""
    pairs = [(_inf(a), _inf(b)) for a in left for b in right]
    if n_seeds is not None and n_seeds < MIN_SEEDS:  # either way: fails needs the seeds holds does
        return inconclusive(n_seeds)
    ok = all(a < b if op == "<" else a > b for a, b in pairs)
    return HOLDS if pairs and ok else FAILS


def close_verdict(a, se_a, b, se_b, n_seeds: int | None = None) -> str:
    if n_seeds is not None and n_seeds < MIN_SEEDS:
        return inconclusive(n_seeds)
    return FAILS if abs(a - b) > 2 * max(se_a, se_b) else HOLDS


def count_verdict(n_holding: int, n_failed: int, at_least: int, out_of: int, n_run: int = 0) -> str:
    """A claim over out_of settings that holds in at least at_least of them; n_run: the
    settings with results so far (some, yet too few to decide: inconclusive, saying how many)."""
    if n_failed > out_of - at_least:
        return FAILS
    if n_holding >= at_least:
        return HOLDS
    return f"{INCONCLUSIVE} ({n_run} of {out_of} settings run)" if n_run else NOT_RUN


CLAIM = re.compile(r"^\s*(.+?)\s*([<>~])\s*(.+?)\s*$")
ITEM = re.compile(r"^(\w+)(?:\[(.*)\])?$")


def parse_claim(text: str):
    """'tpo,dg < pg,grpo' or 'tpo[D=1000] ~ tpo[D=0]' -> (left items, op, right items);
    an item is (algo, {setting: value})."""
    m = CLAIM.match(text)
    if not m:
        raise ValueError(f"not a claim: {text!r}")

    def items(side):
        out = []
        for part in side.split(","):
            im = ITEM.match(part.strip())
            if not im:
                raise ValueError(f"bad item {part!r} in claim {text!r}")
            quals = dict(q.split("=", 1) for q in (im.group(2) or "").split(";") if q)
            out.append((im.group(1), quals))
        return out

    return items(m.group(1)), m.group(2), items(m.group(3))


def rules(paper_seeds: dict) -> str:
    """The rules' wording for the report; paper_seeds: replicate group -> the paper's
    per-seed final errors, for the widened margins it quotes."""
    tpo, grpo = paper_seeds["terminal-tpo-H10"], paper_seeds["terminal-grpo-H10"]
    term = MARGINS["terminal_error"]
    return _RULES.format(min_seeds=MIN_SEEDS, needs_gpu=NEEDS_GPU, z=REPLICATE_Z, beyond=BEYOND,
                         draws=OWN_SEEDS_DRAWS, floor=OWN_SEEDS_FLOOR,
                         delta_tpo=replicate_margin(term, tpo).delta,
                         delta_grpo=replicate_margin(term, grpo).delta,
                         se_grpo=statistics.stdev(grpo) / math.sqrt(len(grpo)))
