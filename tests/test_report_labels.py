"""The committed report's labels say what they mean: checked row by row on
reproduction/REPRODUCTION.md, from each row's printed interval and the rules' margins."""
import re

import pytest

from tpo_bench.analysis.paper import pages, report
from tpo_bench.analysis.paper import verdicts as V

from conftest import REPO

TEXT = (REPO / "reproduction" / "REPRODUCTION.md").read_text()
SEEDS = report.load_paper_seeds()
INTERVAL = re.compile(r"^\[(-?[\d.e+-]+), (-?[\d.e+-]+)\]$")


def _terminal_rows():
    """terminal_h_sweep's final-error rows with a printed interval and a claimed verdict
    (a row beyond the paper's own seeds gets none: test_power.py holds that rule)."""
    out = []
    for r in pages.section_tables(TEXT, "terminal_h_sweep")[0]:
        m = INTERVAL.match(r["90 % interval"])
        paper = V.parse_paper(r["paper"])
        if (not m or paper.kind != "number" or int(re.match(r"\d+", r["seeds"]).group()) < V.MIN_SEEDS
                or r["verdict"].startswith(V.BEYOND)):
            continue
        h = re.search(r"H=(\d+)", r["setting"]).group(1)
        group = f"terminal-{r['algorithm']}-H{h}"
        margin = V.replicate_margin(V.MARGINS["terminal_error"], SEEDS.get(group, ()))
        out.append((r, paper, float(m[1]), float(m[2]), margin))
    return out


ROWS = _terminal_rows()


def test_there_are_judged_rows():
    assert len(ROWS) >= 3  # TPO's prompt-matched and GRPO's two rows at H = 10


@pytest.mark.parametrize("row,paper,lo,hi,margin", ROWS,
                         ids=[f"{r['algorithm']}-{r['paper']}" for r, *_ in ROWS])
def test_each_label_matches_its_interval(row, paper, lo, hi, margin):
    low, high = paper.value - paper.r - margin.delta, paper.value + paper.r + margin.delta
    inside, outside = low <= lo and hi <= high, hi < low or lo > high
    covers = lo <= paper.value + paper.r and hi >= paper.value - paper.r
    kind = report.verdict_kind(row["verdict"])
    assert (kind == V.REPRODUCED) == inside, row["verdict"]
    assert (kind == V.DIFFERS) == outside, row["verdict"]
    if not inside and not outside:
        assert kind == (V.NOT_DISTINGUISHABLE if covers else V.INCONCLUSIVE), row["verdict"]


def test_every_mnist_test_error_row_says_which_images_and_names_the_comparable_row():
    for r in pages.section_tables(TEXT, "mnist")[0]:
        assert "first 3,000 of the 10,000 test images" in r["notes"], r["algorithm"]
        assert "comparable row is mnist_holdout's validation split" in r["notes"]
    holdout = pages.section_tables(TEXT, "mnist_holdout")[0]
    assert all("the comparable row" in r["notes"] for r in holdout)


def test_the_summary_counts_the_comparable_mnist_rows():
    """Each MNIST number on the test file repeats the validation split's row, which the
    summary counts: the comparable one."""
    test_file = pages.section_tables(TEXT, "mnist")[0]
    holdout = pages.section_tables(TEXT, "mnist_holdout")[0]
    assert test_file and holdout
    assert all("repeats a row of `mnist_holdout`" in r["notes"] for r in test_file), test_file
    assert not any("repeats a row" in r["notes"] for r in holdout)
    assert [n for n, _ in report.counting_order(report.EXPERIMENTS)].index("mnist_holdout") \
        < [n for n, _ in report.counting_order(report.EXPERIMENTS)].index("mnist")


def test_a_pass_that_still_shows_a_difference_says_so():
    # "reproduced" is equivalence within the margin; when the interval also excludes the
    # paper's value (MNIST TPO on the 3,000-image test file: [3.76, 3.96] against 2.9) the
    # row says a smaller difference is shown
    seen = 0
    for section in ("mnist", "mnist_holdout", "terminal_h_sweep", "eta_sweep", "tabular_single"):
        for r in pages.section_tables(TEXT, section)[0]:
            m, paper = INTERVAL.match(r["90 % interval"]), V.parse_paper(r["paper"].split(" (")[0])
            if not m or r["verdict"] != V.REPRODUCED or paper.kind != "number" or "steps" in r["metric"]:
                continue
            excludes = float(m[1]) > paper.value + paper.r or float(m[2]) < paper.value - paper.r
            assert excludes == ("excludes the paper's value" in r["notes"]), (section, r["algorithm"])
            seen += excludes
    assert seen >= 1


def test_every_interval_the_report_states_is_at_the_rules_level():
    """The table's interval column and every central interval the report states (its notes
    and its prose) name the one level the intervals are computed at (verdicts.LEVEL)."""
    level = f"{V.LEVEL * 100:g} %"
    assert f"| {level} interval |" in TEXT
    stated = re.findall(r"central\s+(\d+(?:\.\d+)?)\s+%", TEXT)
    assert stated, "no central interval stated in the report"
    assert {f"{s} %" for s in stated} == {level}


def test_not_run_yet_is_never_said_of_a_row_with_results():
    """A row whose 'ours' column shows results is judged (or inconclusive, saying why),
    never labelled as not run."""
    ran = [(r.get("citation"), r["verdict"]) for t in pages.tables(TEXT) for r in t
           if r.get("verdict") == V.NOT_RUN and r.get("ours")]
    assert not ran
    assert any(r.get("verdict") == V.NOT_RUN for t in pages.tables(TEXT) for r in t)  # the label is read


def test_no_row_places_our_mean_among_subsets_when_only_one_exists():
    """At the paper's own seed count there is one subset of its seeds, so "where our mean
    falls among the means of n of its n seeds" says nothing: the note is left out."""
    same = [m.group(0) for m in re.finditer(r"means of (\d+) of the paper's (\d+) seeds", TEXT)
            if int(m.group(1)) >= int(m.group(2))]
    assert not same, same


def test_rows_judged_on_another_matchings_runs_say_so():
    """TPO and GRPO draw K candidates per prompt, so their prompt-matched runs are also the
    interaction-matched configuration: those rows say whose runs they are."""
    rows = pages.section_tables(TEXT, "terminal_h_sweep")[0]
    inter = [r for r in rows if "match=interactions" in r["setting"] and r["algorithm"] in ("tpo", "grpo")
             and r["ours"]]
    assert inter and all("prompt-matched runs" in r["seeds"] for r in inter), [r["seeds"] for r in inter]
    own = [r for r in rows if "match=interactions" in r["setting"] and r["algorithm"] in ("ppo", "dg") and r["ours"]]
    assert own and not any("matched runs" in r["seeds"] for r in own)
