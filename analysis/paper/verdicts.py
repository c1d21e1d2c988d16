"""The verdict rules of the reproduction report (reproduction/REPRODUCTION.md): one
function per rule, and RULES, their wording for the report (kept beside the code so the
two cannot drift apart).

Inputs are our statistics (seed mean and its 90 % Student-t interval for a final error,
a 90 % bootstrap interval over seeds for steps to a threshold), the paper's value as
printed in paper_numbers.csv beside this file and, where they are known, the paper's
per-seed values (paper_seeds.csv). No verdict is ever typed by hand.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tpo_bench.analysis import stats

REPRODUCED, INCONCLUSIVE, DIFFERS = "reproduced", "inconclusive", "differs"
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

# Rows whose per-seed outcome is bimodal (a seed solves the task or stalls far above):
# judged by seeds_verdict against the paper's own seeds, not by an interval on the mean.
SOLVED_PCT = stats.SOLVED_PCT  # every solved paper seed ends <= 0.5 %, every other >= 1.375 %
BIMODAL_SHARE = 0.25  # bimodal: at least this share of the paper's seeds solve, and of them not
PASS_P, DIFFERS_P = 0.10, 0.05  # reproduced at p >= PASS_P, differs at p < DIFFERS_P
# Fewest seeds a bimodal-row verdict is claimed at, from 1,000 redraws (with replacement)
# of the paper's own seeds per count (tests/test_power.py): from 9 seeds on, GRPO's pass
# TPO's row at most 3.5 % of the time and TPO's GRPO's 1.7 %; at 8 TPO's pass GRPO's
# row 5.0 %, at 7 6.2 %, at 6 12.5 %. A correct method's own redraws pass 96-99 %.
BIMODAL_MIN_SEEDS = 9

def inconclusive(n: int) -> str:
    return f"{INCONCLUSIVE} ({n} seeds)"


RULES = """\
Verdicts are computed by `analysis/paper/verdicts.py` from the rows of
`analysis/paper/paper_numbers.csv` and our runs; none is typed by hand. A paper value
printed as 6.9 stands for [6.85, 6.95] (half a unit of its last digit, r). Every number
row belongs to a family whose equivalence margin δ was declared before any verdict used
it (table below, derived from the paper's printed numbers only); our statistic's interval
is the 90 % two-sided interval, i.e. two one-sided tests at 5 % each (TOST).

- **Final error %** (a seed mean): Student-t interval, mean ± t(0.95, n − 1) × s / √n with
  s the seeds' standard deviation (ddof = 1). *Reproduced* when it lies inside
  [paper − r − δ, paper + r + δ]; *differs* when it lies entirely outside that range;
  otherwise *inconclusive (n seeds)*. The SE shown beside our mean is the paper's
  std(ddof = 0) / √n.
- **Final error % of a bimodal row**: where the paper's per-seed final errors are known
  (`analysis/paper/paper_seeds.csv`) and split into both outcomes (at least {share:.0%} of
  them below {solved:g} %, solved, and at least {share:.0%} not; the terminal-reward TPO and
  GRPO rows at H = 10), no interval on the mean can pass: the paper's own GRPO seeds give a
  20-seed SE of 9.9 pts. Such a row is judged by a two-sided permutation test of the
  difference between our seed mean and the paper's seeds' ({n_perm:,} relabellings):
  *reproduced* at p ≥ {pass_p:g}, *differs* at p < {differs_p:g}, else *inconclusive*, and
  *inconclusive (n seeds)* below {bimodal_min} seeds. Rows of the same configuration
  printed from another replicate (interaction-matched 19.0 / 48.7) are judged against
  these, the configuration's known seeds. Power, on redraws (with replacement) of the
  paper's own seeds, asserted by `tests/test_power.py` in CI: at {bimodal_min} and at 20
  seeds, TPO's and GRPO's redraws pass their own row at least 80 % of the time, and the
  other method's row at most 5 %; with fewer seeds the other's row passes more often
  (the table by seed count: `docs/reproducing.md`).
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
- **Fewer than {min_seeds} seeds**: *inconclusive (n seeds)* whatever the interval says. Fed
  k-seed subsets of the paper's own per-seed errors (`analysis/paper/paper_seeds.csv`), the rule
  must not say *reproduced* for GRPO's seeds against TPO's 7.4 % row nor TPO's against
  GRPO's 50.4 %, nor *differs* for either against its own row, more than 5 % of the time;
  that holds from {min_seeds} seeds on (at most 0.1 %, 0 %, 0 % and 3.6 %) and breaks at 4
  (GRPO "differs" from its own row 5.3 %). Those two rows are bimodal and judged by the
  rule above; the t-interval rule would pass 20-seed redraws of TPO's seeds 77 % of the
  time and of GRPO's never, which is why.
- **Formula check** rows (per-context weights) are computed from the science page's formulas, not from
  runs: *reproduced (formula check)* when the formula rounds to the printed value.
- **Ordering claims** ("TPO lowest", "PPO later than DG or never") compare our seed means
  ("never" later than any step). *Fails* as soon as the results so far contradict it: an
  inequality already violated between items that ran, or, for a claim over several
  settings ("in 7 of 8 variants"), more settings failed than the claim can spare. *Holds*
  only when every item ran with at least {min_seeds} seeds and every inequality holds;
  *inconclusive (n seeds)* when it holds on fewer seeds; "a ~ b" holds when
  |a − b| ≤ 2 × max(SE_a, SE_b).
- Notes, not ways to pass: the paper's replicate spread (its values for one configuration
  in different tables) and, where its per-seed values are known, where our n-seed mean
  falls among the means of n of its seeds.
- *Not run yet*: no results for that row (or for a claim, none that contradict it yet).
- *{needs_gpu}*: the paper's LLM results (science §Language models; family `llm_rlvr`), read from its text
  and figure, from pretrained 1.5–1.7B models on GPUs. This project has had neither the
  weights nor a GPU, so they are listed with this status and never judged, whatever runs
  exist: no margin is declared for them (judging them would be a rule change). Their
  presets are `llm_gsm8k` and `llm_graph_color` with `task.model_path`.
""".format(min_seeds=MIN_SEEDS, needs_gpu=NEEDS_GPU, share=BIMODAL_SHARE, solved=SOLVED_PCT,
           n_perm=stats.N_RESAMPLES, pass_p=PASS_P, differs_p=DIFFERS_P,
           bimodal_min=BIMODAL_MIN_SEEDS)

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


def equivalence(lo, hi, low, high, n: int) -> str:
    """Our interval [lo, hi] against the paper's margin range [low, high] (TOST)."""
    if n < MIN_SEEDS:
        return inconclusive(n)
    if low <= lo and hi <= high:
        return REPRODUCED
    if lo > high or hi < low:
        return DIFFERS
    return inconclusive(n)


def margin_range(paper: Paper, margin: Margin) -> tuple[float, float]:
    if margin.scale == "ratio":
        return (paper.value - paper.r) / margin.delta, (paper.value + paper.r) * margin.delta
    return paper.value - paper.r - margin.delta, paper.value + paper.r + margin.delta


def number_verdict(paper: Paper, margin: Margin, lo: float, hi: float, n: int) -> str:
    """A printed final error against our 90 % t-interval [lo, hi] over n seeds."""
    return equivalence(lo, hi, *margin_range(paper, margin), n)


def is_bimodal(paper_seeds) -> bool:
    """Whether the paper's per-seed final errors (%) split into both outcomes: at least
    BIMODAL_SHARE of them below SOLVED_PCT (solved) and at least as large a share not."""
    v = [float(x) for x in paper_seeds]
    solved = sum(x < SOLVED_PCT for x in v) / len(v) if v else 0.0
    return BIMODAL_SHARE <= solved <= 1 - BIMODAL_SHARE


def seeds_verdict(ours, paper_seeds) -> tuple[str, float]:
    """Our per-seed final errors against the paper's, for a bimodal row: (verdict, p).

    No interval on the mean can pass there: a bimodal seed mean's spread at 20 seeds
    (GRPO's own: SE 9.9 pts) is wider than any margin that still excludes the neighbouring
    method. So the question is the other one: could our seeds be another draw of the
    paper's? A two-sided permutation test of the difference in seed means (stats.
    mean_difference_test: no shape assumed, and the mean is what the paper prints; a
    solve-fraction test cannot tell GRPO from TPO at 20 seeds, whose stalled seeds sit
    near 100 % and 13 %). Reproduced at p >= PASS_P, differs at p < DIFFERS_P, else
    inconclusive; below BIMODAL_MIN_SEEDS always inconclusive. Its power on the paper's
    own seeds is tests/test_power.py's: a pass must exclude the other method."""
    p = stats.mean_difference_test(ours, paper_seeds)
    n = len(ours)
    if n < BIMODAL_MIN_SEEDS or DIFFERS_P <= p < PASS_P:
        return inconclusive(n), p
    return (REPRODUCED if p >= PASS_P else DIFFERS), p

def bound_verdict(paper: Paper, lo: float, hi: float, n: int) -> str:
    if paper.op == ">":
        return equivalence(lo, hi, paper.value, math.inf, n)
    return equivalence(lo, hi, -math.inf, paper.value, n)


def steps_verdict(paper: Paper, margin: Margin, ours, lo, hi, n: int, last_step) -> str:
    """ours / lo / hi are steps or None (never): the 90 % bootstrap interval of the
    seed-mean crossing."""
    low, high = margin_range(paper, margin)
    if ours is None and last_step is not None and last_step < paper.value - paper.r:
        return TOO_SHORT
    if lo is None and last_step is not None and last_step < high:
        return inconclusive(n)  # "not within our run" cannot tell whether it is beyond high
    return equivalence(_inf(lo), _inf(hi), low, high, n)


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
    ok = all(a < b if op == "<" else a > b for a, b in pairs)
    if not pairs or not ok:
        return FAILS
    if n_seeds is not None and n_seeds < MIN_SEEDS:
        return inconclusive(n_seeds)
    return HOLDS


def close_verdict(a, se_a, b, se_b, n_seeds: int | None = None) -> str:
    if abs(a - b) > 2 * max(se_a, se_b):
        return FAILS
    return inconclusive(n_seeds) if n_seeds is not None and n_seeds < MIN_SEEDS else HOLDS


def count_verdict(n_holding: int, n_failed: int, at_least: int, out_of: int) -> str:
    """A claim over out_of settings that holds in at least at_least of them."""
    if n_failed > out_of - at_least:
        return FAILS
    if n_holding >= at_least:
        return HOLDS
    return NOT_RUN


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
