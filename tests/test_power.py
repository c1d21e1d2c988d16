"""The verdict rules' margins and power.

The margins are recomputed here from the paper's printed numbers alone (the derivation
written beside verdicts.MARGINS), and the rule is fed the paper's own per-seed results
(analysis/paper_seeds.csv): subsets of GRPO's seeds must not "reproduce" TPO's row, nor
TPO's seeds GRPO's row, and a correct implementation's seeds must pass."""
import math

import numpy as np
import pytest

from analysis import report
from analysis import verdicts as V


def _numeric(rows):
    out = []
    for _, r in rows.iterrows():
        p = V.parse_paper(r["value"])
        if p.kind == "number":
            out.append((r, p.value))
    return out


def half_median_gap(family, ref, columns, ratio=False):
    """Half the median over columns of the gap from the ref algorithm's row to the nearest
    other row (log gap for ratio); ref None: each row against its nearest other row."""
    p = report.load_paper()
    rows = p[p["family"] == family]
    if family == "terminal_error":  # the ablation's TPO row repeats the H = 10 column
        rows = rows[rows["experiment"] == "terminal_h_sweep"]
    dist = (lambda a, b: abs(math.log(a / b))) if ratio else (lambda a, b: abs(a - b))
    gaps = []
    groups = rows.groupby(columns) if columns else [(None, rows)]
    for _, col in groups:
        values = _numeric(col)
        refs = [(r, v) for r, v in values if ref is None or r["algo"] == ref]
        for r, v in refs:
            others = [w for q, w in values if q is not r and (ref is None or q["algo"] != ref)]
            gaps.append(min(dist(v, w) for w in others))
    half = float(np.median(gaps)) / 2
    return math.exp(half) if ratio else half


@pytest.mark.parametrize("family,ref,columns,ratio", [
    ("terminal_error", "tpo", ["H", "match"], False),
    ("k_sweep_error", "tpo", ["K"], False),
    ("epoch_sweep_error", "tpo", ["epochs"], False),
    ("masking_error", "grpo_masked", [], False),
    ("dg_epochs_error", None, [], False),
    ("vocab_steps", "tpo_token", ["V"], True),
    ("variants_steps", "tpo_token", ["reward", "target"], True),
    ("eta_steps", None, [], True),
    ("mnist_error", "tpo", [], False),
    ("mnist_steps", "tpo", [], True),
])
def test_margins_are_derived_from_the_paper(family, ref, columns, ratio):
    m = V.MARGINS[family]
    assert m.scale == ("ratio" if ratio else "abs")
    assert m.delta == pytest.approx(half_median_gap(family, ref, columns, ratio), rel=1e-3)


def test_every_number_row_has_a_declared_family():
    p = report.load_paper()
    numbers = p[p["kind"] == "number"]
    for _, r in numbers.iterrows():
        kind = V.parse_paper(r["value"]).kind
        if r["family"] in ("bound", "formula"):
            continue
        assert r["family"] in V.MARGINS, (r["experiment"], r["value"])
        steps = r["metric"].startswith("steps_to_")
        assert (V.MARGINS[r["family"]].scale == "ratio") == steps, r["family"]
        assert kind in ("number", "never", "bound")
    claims = p[p["kind"] == "ordering"]
    assert (claims["family"] == "").all()
    over = claims[claims["over"] != ""]
    assert (over["out_of"].astype(int) >= over["at_least"].astype(int)).all()
