import functools
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis.paper import report
from tpo_bench.analysis.paper import verdicts as V
from tpo_bench.analysis.paper.experiments import ALIASES, EXPERIMENTS
from synthetic import STEPS, results_table as build_results_table


@functools.lru_cache(maxsize=1)
def _built_table():
    return build_results_table()


def results_table():
    """synthetic.results_table(), built once for the module; each caller gets its own copy."""
    return _built_table().copy()


P = V.parse_paper


def name_figures(mp: pytest.MonkeyPatch, seeds: bool = True) -> None:
    """Figures named, not drawn (the per-seed one too if `seeds`): for tests of verdicts
    and text, which no figure changes (test_report_cli draws its figures)."""
    from tpo_bench.analysis.paper import figures, paper_figures

    def named(name, df, out_dir, *args, **kwargs):
        Path(out_dir).mkdir(parents=True, exist_ok=True)  # as drawing does
        return [Path(out_dir) / f"{name}.png", Path(out_dir) / f"{name}.pdf"]

    mp.setattr(paper_figures, "draw", named)
    mp.setattr(figures, "draw", named)
    if seeds:
        mp.setattr(figures, "draw_seed_distributions",
                   lambda groups, title, out_dir, *a, **k: named(figures.SEEDS_FIGURE, None, out_dir))


@pytest.fixture
def no_figures(monkeypatch):
    name_figures(monkeypatch)


# ---- the rules, one branch at a time ----

def test_parse_paper():
    assert P("6.9") == V.Paper("number", 6.9, r=0.05)
    assert P("0.36").r == pytest.approx(0.005) and P("58").r == 0.5
    assert P("~1,600") == V.Paper("number", 1600, r=50, approx=True)
    assert P(">95") == V.Paper("bound", 95, op=">") and P("<2.3").op == "<"
    assert P("—").kind == P("-").kind == "never"
    # a range as the paper words it ("near 85–87 %"): its midpoint, r half its width
    assert P("85–87") == V.Paper("number", 86.0, r=1.0, approx=True) == P("85-87")


M = V.MARGINS


def test_number_verdict():
    term = M["terminal_error"]  # ± 11.075 around 6.9 ± 0.05: [-4.225, 18.025]
    assert V.number_verdict(P("6.9"), term, 1.0, 18.0, 20) == V.REPRODUCED
    # reaching past the margin: not distinguishable when the interval covers 6.9, and
    # inconclusive (a difference shown, not that it exceeds the margin) when it misses it
    assert V.number_verdict(P("6.9"), term, 1.0, 18.1, 20) == "not distinguishable (20 seeds)"
    assert V.number_verdict(P("6.9"), term, 7.0, 18.1, 20) == "inconclusive (20 seeds)"
    assert V.number_verdict(P("6.9"), term, -5.0, 6.84, 20) == "inconclusive (20 seeds)"
    assert V.number_verdict(P("6.9"), term, 18.1, 30.0, 20) == V.DIFFERS
    assert V.number_verdict(P("6.9"), term, -9.0, -4.3, 20) == V.DIFFERS  # below, too
    # the margin is the family's: MNIST's ± 1.2 around 2.9 makes 4.0..4.2 differ
    assert V.number_verdict(P("2.9"), M["mnist_error"], 3.8, 4.0, 20) == V.REPRODUCED
    assert V.number_verdict(P("2.9"), M["mnist_error"], 4.2, 4.3, 20) == V.DIFFERS
    # below the minimum seed count nothing is claimed, however narrow the interval
    assert V.number_verdict(P("6.9"), term, 6.9, 6.9, V.MIN_SEEDS - 1) == f"inconclusive ({V.MIN_SEEDS - 1} seeds)"
    assert V.number_verdict(P("6.9"), term, 50.0, 60.0, V.MIN_SEEDS - 1).startswith(V.INCONCLUSIVE)
    # a single seed reads as one seed, not "1 seeds"
    assert V.number_verdict(P("6.9"), term, 6.9, 6.9, 1) == "inconclusive (1 seed)"


def test_bound_verdict():
    assert V.bound_verdict(P(">95"), 95.5, 98.0, 20) == V.REPRODUCED
    assert V.bound_verdict(P(">95"), 90.0, 96.0, 20) == "not distinguishable (20 seeds)"
    assert V.bound_verdict(P(">95"), 46.0, 54.0, 20) == V.DIFFERS
    assert V.bound_verdict(P("<2.3"), 0.7, 1.4, 20) == V.REPRODUCED
    assert V.bound_verdict(P("<2.3"), 4.6, 5.4, 20) == V.DIFFERS
    assert V.bound_verdict(P(">99"), 100.0, 100.0, 3) == "inconclusive (3 seeds)"


def test_steps_and_never_verdicts():
    m = M["vocab_steps"]  # 58 ± 0.5 -> [57.5 / 1.2895, 58.5 * 1.2895] = [44.6, 75.4]
    assert V.steps_verdict(P("58"), m, 60, 45, 75, 20, 999) == V.REPRODUCED
    assert V.steps_verdict(P("58"), m, 60, 44, 75, 20, 999) == "not distinguishable (20 seeds)"
    assert V.steps_verdict(P("58"), m, 70, 59, 80, 20, 999) == "inconclusive (20 seeds)"
    assert V.steps_verdict(P("58"), m, 90, 76, 110, 20, 999) == V.DIFFERS
    assert V.steps_verdict(P("58"), m, 40, 30, 44, 20, 999) == V.DIFFERS
    assert V.steps_verdict(P("58"), m, 60, 45, None, 20, 999) == "not distinguishable (20 seeds)"  # open above
    assert V.steps_verdict(P("904"), m, None, None, None, 20, 500) == V.TOO_SHORT
    assert V.steps_verdict(P("58"), m, None, None, None, 20, 999) == V.DIFFERS  # never, in a long run
    # never within 1000 episodes cannot be told from a crossing at 1,100 (872 × 1.29)
    assert V.steps_verdict(P("872"), m, None, None, None, 20, 999) == "inconclusive (20 seeds)"
    assert V.steps_verdict(P("58"), m, 60, 45, 75, 4, 999) == "inconclusive (4 seeds)"
    run = 1000  # paper "—": never within the run
    assert V.never_verdict(m, None, None, 20, run) == V.REPRODUCED
    assert V.never_verdict(m, 700, None, 20, run) == "inconclusive (20 seeds)"
    assert V.never_verdict(m, 300, 770, 20, run) == V.DIFFERS  # 770 < 1000 / 1.2895
    assert V.never_verdict(m, 300, 780, 20, run) == "inconclusive (20 seeds)"
    assert V.never_verdict(m, None, None, 3, run) == "inconclusive (3 seeds)"
    assert V.formula_verdict(P("0.73"), 0.7312) == "reproduced (formula check)"
    assert V.formula_verdict(P("0.73"), 0.7361) == "differs (formula check)"


def test_ordering_verdicts():
    assert V.ordering_verdict([6.9], [14.5, 66.6, 12.0], "<", 20) == V.HOLDS
    assert V.ordering_verdict([6.9], [14.5, 66.6, 12.0], "<", 3) == "inconclusive (3 seeds)"
    assert V.ordering_verdict([6.9, 13.0], [12.0], "<", 3) == "inconclusive (3 seeds)"  # fails needs seeds too
    assert V.ordering_verdict([6.9, 13.0], [12.0], "<", 5) == V.FAILS
    assert V.ordering_verdict([None], [200], ">", 20) == V.HOLDS  # PPO never, DG at 200
    assert V.ordering_verdict([None], [None], ">", 20) == V.FAILS
    assert V.ordering_verdict([], [1.0], "<") == V.FAILS
    assert V.close_verdict(3.0, 0.2, 3.3, 0.1, 20) == V.HOLDS
    assert V.close_verdict(3.0, 0.2, 3.3, 0.1, 3) == "inconclusive (3 seeds)"
    assert V.close_verdict(3.0, 0.2, 4.0, 0.1, 20) == V.FAILS
    assert V.close_verdict(3.0, 0.2, 4.0, 0.1, 4) == "inconclusive (4 seeds)"
    # over settings: 7 of 8 needed; fails as soon as 2 failed, whatever is still to run
    assert V.count_verdict(7, 1, 7, 8) == V.HOLDS
    assert V.count_verdict(3, 2, 7, 8) == V.FAILS
    assert V.count_verdict(0, 0, 7, 8) == V.NOT_RUN
    # some settings ran, too few to decide: not "not run yet"
    assert V.count_verdict(3, 1, 7, 8, n_run=4) == "inconclusive (4 of 8 settings run)"
    assert V.count_verdict(0, 1, 7, 8, n_run=1) == "inconclusive (1 of 8 settings run)"
    assert V.count_verdict(2, 1, 4, 4) == V.FAILS  # "in every column": one failure is enough
    left, op, right = V.parse_claim("tpo[D=1000] ~ tpo[D=0]")
    assert left == [("tpo", {"D": "1000"})] and op == "~" and right == [("tpo", {"D": "0"})]
    assert V.parse_claim("tpo,dg < pg,grpo")[2] == [("pg", {}), ("grpo", {})]
    with pytest.raises(ValueError):
        V.parse_claim("tpo is best")


@pytest.mark.slow  # long in process
def test_rows_no_rule_judges_keep_their_status_whatever_runs_exist(tmp_path, no_figures):
    """A family in verdicts.UNJUDGED (the paper's LLM rows: weights and a GPU) is listed
    with its status and never judged. Here a number and a claim of the H sweep, whose runs
    the synthetic table holds, moved into it: both get the status, counted in the summary,
    and every other row keeps its verdict."""
    from tpo_bench.analysis.paper.rule_log import verdict_rows

    df = results_table()
    df = df[df["experiment"] == "terminal_h_sweep"]
    p = report.load_paper()
    paper = p[p["experiment"] == "terminal_h_sweep"].reset_index(drop=True)
    moved = paper.copy()
    picks = [moved.index[moved["kind"] == "number"][0], moved.index[moved["kind"] == "ordering"][0]]
    moved.loc[picks, "family"] = "llm_rlvr"
    before = verdict_rows(report.build(df, tmp_path / "a.md", tmp_path / "fa", paper=paper))
    text = report.build(df, tmp_path / "b.md", tmp_path / "fb", paper=moved)
    after = verdict_rows(text)
    both = before.merge(after, on=["section", "key"], suffixes=("_before", "_after"))
    assert len(both) == len(before) == len(paper)
    status = both["verdict_after"] == V.NEEDS_GPU
    assert status.sum() == 2 and not (both["verdict_before"] == V.NEEDS_GPU).any()
    assert (both.loc[~status, "verdict_before"] == both.loc[~status, "verdict_after"]).all()
    assert summary_table(text)["**total, each once**"][V.NEEDS_GPU] == "2"
    assert f"2 {V.NEEDS_GPU}" in text  # named in the summary's sentence, not dropped


def test_rule_log_reads_moves_with_keys_as_printed():
    """A rule log lists the rows present in both reports whose verdict changed; a cell's
    escaped pipe is a pipe of its key, not a column break."""
    from tpo_bench.analysis.paper.rule_log import moves, moves_markdown

    def report_text(v1, v2):
        return ("## Claims (`x`)\n\n| citation | claim | verdict |\n|---|---|---|\n"
                f"| Fig 1 | \\|a\\| < b | {v1} |\n| Fig 2 | c | {v2} |\n")
    moved = moves(report_text(V.HOLDS, V.HOLDS), report_text(V.FAILS, V.HOLDS))
    assert moved[["key", "verdict_before", "verdict_after"]].values.tolist() == [
        ["Fig 1 · |a| < b", V.HOLDS, V.FAILS]]
    assert moves_markdown(moves(report_text(V.HOLDS, V.FAILS), report_text(V.HOLDS, V.FAILS))) \
        == "(no verdict moved)"


@pytest.mark.slow  # git archive and a report in a child process
def test_rule_log_writes_each_report_with_its_own_trees_code(tmp_path):
    """The report before and after a rule change is computed by the code of that commit,
    not by whatever tpo_bench is installed: a tree whose label text is edited writes it."""
    from tpo_bench.analysis.paper.rule_log import extract, report_at

    tree = extract("HEAD", tmp_path / "tree")
    rules = tree / "analysis" / "paper" / "verdicts.py"
    assert f'"{V.NOT_RUN}"' in rules.read_text()
    rules.write_text(rules.read_text().replace(f'"{V.NOT_RUN}"', '"not run (edited tree)"'))
    df = results_table()
    results = tmp_path / "results.parquet"
    df[df["experiment"] == "terminal_h_sweep"].to_parquet(results)
    text = report_at(tree, results, tmp_path / "report.md")
    assert "| not run (edited tree) |" in text and f"| {V.NOT_RUN} |" not in text


@pytest.mark.slow  # long in process
def test_the_papers_llm_rows_need_weights_and_a_gpu(tmp_path, no_figures):
    """science §Language models's seven LLM numbers and claims are listed with the status, none judged, even
    beside a run of the GSM8K experiment; adding them moves no other verdict."""
    from tpo_bench.analysis.paper.rule_log import verdict_rows

    p = report.load_paper()
    llm = p[p["experiment"].str.startswith("llm_")]
    assert len(llm) == 7 and set(llm["family"]) == {"llm_rlvr"} and (p["family"] == "llm_rlvr").sum() == 7
    assert sorted(llm["value"]) == sorted(["tpo < grpo", "85–87", "85–87", "~0.0", "~0.96", "~0.96", "~0.81"])
    df = results_table()
    df = df[df["experiment"].isin(["terminal_h_sweep", "mnist"])]
    fake = df[df["experiment"] == "mnist"].assign(  # a GSM8K run as a GPU would record it
        experiment="llm_gsm8k", config_hash="llmrun", **{"task.impl": "llm", "task.dataset": "gsm8k",
                                                         "optim.lr": 1e-5})
    df = pd.concat([df, fake], ignore_index=True)
    old = p[p["experiment"].isin(["terminal_h_sweep", "mnist"])]
    before = verdict_rows(report.build(df, tmp_path / "a.md", tmp_path / "fa", paper=old))
    text = report.build(df, tmp_path / "b.md", tmp_path / "fb", paper=pd.concat([old, llm]))
    after = verdict_rows(text)
    new = after[after["section"].str.startswith("llm_")]
    assert len(new) == 7 and (new["verdict"] == V.NEEDS_GPU).all()
    both = before.merge(after, on=["section", "key"], suffixes=("_before", "_after"))
    assert len(both) == len(before) == len(old)
    assert (both["verdict_before"] == both["verdict_after"]).all()
    gsm = text.split("(`llm_gsm8k`)")[1].split("\n## ")[0]
    assert "Runs: " in gsm  # the run is selected (at the LLMs' lr 1e-5), still not judged
    graph = text.split("(`llm_graph_color`)")[1].split("\n## ")[0]
    assert "task.model_path=/path/to/Qwen3-1.7B" in graph  # how to run it, in "Not run yet"


# ---- the paper's numbers ----

def test_paper_numbers_file():
    p = report.load_paper()
    assert set(p["experiment"]) <= set(EXPERIMENTS)
    assert set(p["metric"]) <= {"final_error_pct", "steps_to_1pct", "steps_to_5pct", "auc_error",
                                "mean_misalignment", "mean_log10_error",
                                "mean_log10_misalignment", "weight_p0.1",
                                # science §Language models's LLM rows (unjudged: family llm_rlvr)
                                "step_reaching_50pct_test_accuracy", "final_test_accuracy_pct",
                                "final_train_score"}
    assert (p["citation"] != "").all()
    for _, r in p.iterrows():
        if r["kind"] == "ordering":
            V.parse_claim(r["value"])
        else:
            assert r["kind"] == "number"
            P(r["value"])
            assert r["algo"]
        assert set(k for k in report.SETTINGS if r[k]) <= set(ALIASES)
    # The special entries are kept as printed.
    assert (p["value"] == ">95").sum() >= 10 and (p["value"] == "—").sum() == 9
    # Replicate spread = the range of the paper's values for one configuration.
    for group, g in p[p["replicate_group"] != ""].groupby("replicate_group"):
        values = [P(v) for v in g["value"]]
        if all(v.kind == "number" for v in values):
            nums = [v.value for v in values]
            assert float(g["replicate_spread"].iloc[0]) == pytest.approx(max(nums) - min(nums)), group
    tok = p[p["replicate_group"] == "dense-V2-bag-revcopy-tpo_token"]
    assert sorted(tok["value"].astype(int)) == [55, 58, 96] and tok["replicate_spread"].eq("41").all()
    k32 = p[p["replicate_group"] == "mech-tpo-K32-e4"]
    assert sorted(k32["value"]) == ["0.05", "0.05", "2.6"]
    h7 = p[p["replicate_group"] == "terminal-tpo-H7"]
    assert set(h7["match"]) == {"prompts", "interactions"} and set(h7["value"]) == {"6.9", "1.8"}


def test_paper_seeds_are_the_printed_means():
    seeds, p = report.load_paper_seeds(), report.load_paper()
    assert set(seeds) == {"terminal-tpo-H10", "terminal-grpo-H10"}
    for group, values in seeds.items():
        assert len(values) == 20
        # each is one episode's exact-match error over B * K = 800 rollouts, as ours
        assert all(v * 8 == round(v * 8) for v in values), group
        rows = p[(p["replicate_group"] == group) & (p["match"] == "prompts")]
        assert len(rows) >= 1
        for printed in rows["value"]:
            paper = P(printed)
            assert abs(np.mean(values) - paper.value) <= paper.r, (group, printed)


def test_seed_tails_are_a_note_not_a_way_to_pass():
    seeds, p = report.load_paper_seeds(), report.load_paper()
    row = p[(p["replicate_group"] == "terminal-grpo-H10") & (p["match"] == "prompts")].iloc[0]
    assert row["value"] == "50.4"

    def ours(*per_seed):
        lo, hi = report.stats.t_interval(per_seed, V.LEVEL)
        return report.Ours(float(np.mean(per_seed)), 0.0, lo, hi, len(per_seed), per_seed=per_seed)

    # GRPO's seeds are all or nothing: 7 of the paper's 20 end at exactly 0 %, so 3 solved
    # seeds are C(7, 3) = 35 of the C(20, 3) = 1140 subsets (3.1 %): a rule on those tails alone would pass it
    solved = ours(0.0, 0.0, 0.0)
    assert report.seed_tails(row, solved, seeds) == (pytest.approx(35 / 1140), 1.0)
    assert report.number_verdict(row, solved) == "inconclusive (3 seeds)"
    # five solved seeds: an interval [0, 0] outside 50.4 ± 11.1, whatever the tails say
    assert report.number_verdict(row, ours(*[0.0] * 5)) == V.DIFFERS
    assert report.seed_tails(row, ours(*[0.0] * 21), seeds) is None
    other = p[p["replicate_group"] == "terminal-tpo-H7"].iloc[0]
    assert report.seed_tails(other, solved, seeds) is None


def test_rows_with_known_paper_seeds_use_the_replicate_margin():
    seeds, p = report.load_paper_seeds(), report.load_paper()
    grpo = p[(p["replicate_group"] == "terminal-grpo-H10") & (p["match"] == "prompts")].iloc[0]
    tpo = p[(p["replicate_group"] == "terminal-tpo-H10") & (p["match"] == "prompts")].iloc[0]

    def ours(per_seed):
        lo, hi = report.stats.t_interval(per_seed, V.LEVEL)
        return report.Ours(float(np.mean(per_seed)), 0.0, lo, hi, len(per_seed), per_seed=tuple(per_seed))

    # 50.4 +- 23.1 is [27.25, 73.55]: a GRPO at 45, interval [39.05, 50.95], passes there;
    # against the family's +- 11.075 ([39.275, 61.525]) it is not distinguishable
    close = ours([30.0, 60.0] * 10)
    assert report.number_verdict(grpo, close, seeds) == V.REPRODUCED
    assert report.number_verdict(grpo, close, {}) == V.not_distinguishable(20)
    # the paper's own first 9 GRPO seeds (mean 37.5, interval [11, 64]): neither shown
    # close nor shown different, so not "reproduced"
    assert report.number_verdict(grpo, ours(seeds["terminal-grpo-H10"][:9]), seeds) == \
        V.not_distinguishable(9)
    assert report.number_verdict(tpo, ours(seeds["terminal-grpo-H10"][:9]), seeds) in (
        V.DIFFERS, V.inconclusive(9))
    assert report.known_seeds(p[p["replicate_group"] == "terminal-tpo-H7"].iloc[0], seeds) == ()


def test_paired_comparisons_pair_by_seed_and_read_one_sided():
    tpo = {0: 1.0, 1: 11.0, 2: 21.0, 3: 31.0, 4: 41.0, 9: 99.0}  # seed 9: no partner
    grpo = {s: v + 1 for s, v in tpo.items() if s != 9}
    c = report.paired_comparison(tpo, grpo)
    assert c["n"] == 5 and c["p"] == pytest.approx(1 / 32)
    assert report.paired_reading(c) == "TPO lower, p = 0.031 at 5 seeds"
    worse = report.paired_comparison(grpo, tpo)
    assert worse["p"] == 1.0 and report.paired_reading(worse).startswith("not significant at 5 seeds")
    assert report.paired_comparison(tpo, {7: 0.0}) is None


def test_provenance_marks_what_each_seed_was_recorded_under():
    prov = {("h", 0): {"legacy": True, "commits": [], "kernels": "not recorded"},
            ("h", 1): {"legacy": True, "commits": [], "kernels": "not recorded"},
            ("h", 2): {"legacy": False, "commits": ["abc-dirty"], "kernels": "AVX2"},
            ("h", 3): {"legacy": False, "commits": ["abc"], "kernels": "AVX2 + not recorded"},
            ("g", 0): {"legacy": True, "commits": [], "kernels": "AVX512"}}
    text = report.provenance_text(frozenset({("h", 0), ("h", 1), ("h", 2), ("h", 3)}), prov)
    assert text == ("legacy hash: seeds 0–1; -dirty commit: seeds 2; commit not recorded: seeds 0–1; "
                    "CPU kernels: AVX2 (seeds 2); AVX2 + not recorded (seeds 3); not recorded (seeds 0–1)")
    assert report.provenance_text(frozenset({("h", 3)}), prov) == "CPU kernels: AVX2 + not recorded (seeds 3)"
    assert report.seed_list([5, 0, 1, 2, 7, 8]) == "0–2, 5, 7–8"


def test_analytic_weights_match_the_paper():
    # the formula lives with its task; the report judges the paper's weights by it, read
    # through the task table (TaskOptions.analytic_weight)
    from tpo_bench.tasks.tabular import analytic_weight

    assert analytic_weight("tpo") == pytest.approx(0.73, abs=0.005)
    assert analytic_weight("grpo") == pytest.approx(0.33, abs=0.005)
    assert analytic_weight("dg") == pytest.approx(0.09, abs=0.005)
    assert all(report.analytic_weight(a, 0.1) == analytic_weight(a) for a in ("tpo", "grpo", "dg", "pg"))
    assert report.analytic_weight("tpo", 0.5) == analytic_weight("tpo", 0.5) != analytic_weight("tpo")


def test_a_tabular_multi_without_the_formula_is_refused_by_name(monkeypatch):
    import dataclasses

    from tpo_bench.contract.batch import TaskOptions
    from tpo_bench.contract.registry import Registry

    table = Registry("task", TaskOptions)
    table.register("tabular_multi")(dataclasses.make_dataclass("Plain", [("name", str, "tabular_multi")]))
    monkeypatch.setattr(report, "TASKS", table)
    with pytest.raises(ValueError, match="tabular_multi declares no analytic_weight"):
        report.analytic_weight("tpo", 0.1)


def test_measure_on_a_hand_table():
    rows = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "step": [0, 1, 2] * 2,
                         "error": [0.5, 0.04, 0.0, 0.5, 0.2, 0.02]})
    f = report.measure(rows, "final_error_pct")
    assert f.value == pytest.approx(1.0) and f.se == pytest.approx(1.0 / math.sqrt(2))
    assert f.n_seeds == 2 and f.lo <= f.value <= f.hi
    s = report.measure(rows, "steps_to_5pct")
    assert s.value == 2  # seed-mean: 0.5, 0.12, 0.01
    # SE of the statistic: the crossing is 1 when seed 0 is resampled twice (1/4), else 2
    assert s.hits.steps == (1, 2) and s.se == pytest.approx(math.sqrt(3) / 4, rel=0.03)
    one = report.measure(rows, "steps_to_1pct")
    assert one.value is None and one.hits.n_reached == 1 and one.se is None
    assert report.measure(rows.iloc[:0], "final_error_pct") is None
    # more seeds than the paper: the steps statistic is taken at the paper's seed count
    four = pd.concat([rows.assign(seed=rows["seed"] + 2 * i) for i in range(2)])
    at2 = report.measure(four, "steps_to_5pct", n_paper=2)
    assert at2.n_seeds == 4 and at2.all_seeds == 2 and not at2.by_seeds
    # 2-seed subsets of (fast, slow, fast, slow): 1 when both fast (1 of 6), else 2
    assert (at2.value, at2.lo, at2.hi) == (2, 1, 2)
    assert report.measure(four, "steps_to_5pct", n_paper=4).value == 2


def test_one_seed_prints_no_standard_error():
    """A row with one seed has no SE (its interval is unbounded): the ours cell prints the
    value alone; two seeds print value ± SE."""
    rows = pd.DataFrame({"seed": [0, 0, 1, 1], "step": [0, 1] * 2, "error": [0.5, 0.993, 0.5, 0.2]})
    one = report.measure(rows[rows["seed"] == 0], "final_error_pct")
    two = report.measure(rows, "final_error_pct")
    assert report.ours_text(one) == "99.3"
    assert report.ours_text(two) == f"{report.number_text(two.value)} ± {report.number_text(two.se, 2)}"
    assert two.se > 0


# ---- the report CLI on a synthetic table ----

@pytest.mark.slow  # long in process
def test_report_cli(tmp_path):
    df = results_table()
    keep = df["experiment"].isin(["terminal_h_sweep", "tabular_single", "mnist_stale"])
    df = df[keep].copy()
    # Make TPO at H = 7, prompt-matched, end exactly at the paper's 6.9 %: "reproduced".
    tpo7 = ((df["algo.name"] == "tpo") & (df["task.sequence_length"] == 7)
            & (df["match"] == "prompts") & (df["step"] == STEPS - 1))
    df.loc[tpo7, "error"] = 0.069
    res = tmp_path / "outputs" / "results.parquet"
    res.parent.mkdir()
    df.to_parquet(res)
    out = tmp_path / "REPRODUCTION.md"
    assert report.main(["--results", str(res), "--out", str(out), "--hardware", "2-core test VM"]) == 0
    text = out.read_text()

    assert "## How the verdicts are computed" in text and "inconclusive (n seeds)" in text
    assert "`terminal_error` | ± 11.075 |" in text  # the margins table beside the rules
    row = next(l for l in text.splitlines()
               if l.startswith("| Table: terminal reward, prompt-matched |") and "H=7," in l
               and "| tpo |" in l)
    assert "| 6.9 |" in row and "| inconclusive (3 seeds) |" in row and "| 3 (< 20) |" in row
    assert "below the paper's 20 seeds: ours are seeds 0, 1, 2" in row
    assert "per seed: 6.9, 6.9, 6.9" in row  # few seeds: each one listed, sorted
    for word in (V.FAILS, V.NOT_RUN):
        assert f"| {word} |" in text
    # Sections without results say so; those with results link their figure.
    vocab = text.split("(`vocab_sweep`)")[1].split("\n## ")[0]
    assert "Not run yet" in vocab and "| not run yet |" in vocab
    assert "2-core test VM" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "figures/terminal_h_sweep.png" in links and "figures/tabular_single.png" in links
    for link in links:
        assert (out.parent / link).is_file()
        assert (out.parent / link).with_suffix(".pdf").is_file()
    # The summary counts every verdict of a section (none of these repeats another's).
    summary = summary_table(text)["`terminal_h_sweep`"]
    assert sum(int(summary[v]) for v in report.VERDICT_ORDER) == 42
    # The hero figure draws the H sweep's runs: they are counted where they are judged.
    hero = summary_table(text)["`hero`"]
    assert int(hero["runs"]) > 0 and hero["runs counted here"] == "0"


@pytest.mark.slow  # long in process
def test_report_without_results(tmp_path, no_figures, capsys):
    # nothing to report on is refused, not written as a report of "not run yet" sections
    out = tmp_path / "R.md"
    assert report.main(["--results", str(tmp_path / "missing.parquet"), "--out", str(out)]) == 2
    assert "not found" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "figures").exists()
    # what the report says of sections without results, on a table that has some
    text = report.build(results_table().query("experiment == 'tabular_single'"), out, tmp_path / "figures")
    assert text.count("Not run yet: no results") == len(EXPERIMENTS) - 1
    with pytest.raises(report.NothingToReport):
        report.build(pd.DataFrame(), out, tmp_path / "figures")


def test_hardware_from_summary_json(tmp_path):
    sel = pd.DataFrame({"task.name": ["reverse_h7"] * 2, "algo.name": ["tpo"] * 2,
                        "config_hash": ["abc"] * 2, "seed": [0, 1], "step": [0, 0]})
    run = tmp_path / "reverse_h7" / "tpo" / "abc" / "seed=0"
    run.mkdir(parents=True)
    # a run resumed after a day's pause: 2 h of training, 26 h from its first start to its end
    (run / "summary.json").write_text(
        '{"device": "cpu", "threads": 2, "versions": {"torch": "2.13.0+cpu"}, "duration_s": 93600, '
        '"final": {"step": 1999, "wall_s": 7200.0}}')
    line = report.hardware(sel, tmp_path, None)
    assert line == "cpu, 2 threads, torch 2.13.0+cpu (1 summary.json, 2.00 h of training summed over 1 of them)"
    assert report.hardware(sel, tmp_path, "H200").startswith("H200; cpu, 2 threads")
    assert report.hardware(sel, tmp_path / "nope", None) == "see each run's summary.json"


def test_tuning_trials_and_other_learning_rates_are_not_borrowed():
    from tpo_bench.analysis.paper.experiments import select

    df = results_table()
    base = df[(df["experiment"] == "terminal_h_sweep") & (df["algo.name"] == "ppo")]
    h7 = base[base["config_hash"] == base["config_hash"].iloc[0]]
    same = h7.assign(experiment="other", config_hash="same")  # paper settings: borrowed
    trial = h7.assign(experiment="tuned_terminal", config_hash="trial1")
    other_lr = h7.assign(experiment="other", config_hash="lr2", **{"optim.lr": 2e-3})
    rest = df[df["experiment"] != "terminal_h_sweep"]
    picked = select(pd.concat([rest, same, trial, other_lr], ignore_index=True), "terminal_h_sweep")
    assert "same" in set(picked["config_hash"])
    assert not picked["config_hash"].isin(["trial1", "lr2"]).any()
    # Nor a preset's own runs launched at another learning rate (a probe, not the paper's).
    probe = h7.assign(config_hash="probe", seed=h7["seed"] + 10, **{"optim.lr": 1e-2})
    picked = select(pd.concat([df, probe], ignore_index=True), "terminal_h_sweep")
    assert "probe" not in set(picked["config_hash"]) and h7["config_hash"].iloc[0] in set(picked["config_hash"])


def test_the_dg_epoch_studys_gate_does_not_stand_in_for_the_h_sweeps_dg():
    from tpo_bench.analysis.paper.experiments import select

    df = results_table().assign(**{"algo.surprisal": None})
    dg = df[(df["experiment"] == "terminal_h_sweep") & (df["algo.name"] == "dg")]
    dg = dg[dg["config_hash"] == dg["config_hash"].iloc[0]]
    df.loc[df["algo.name"] == "dg", "algo.surprisal"] = "behaviour"
    current = dg.assign(experiment="dg_epochs", config_hash="current", **{"algo.surprisal": "current"})
    both = pd.concat([df, current], ignore_index=True)
    assert "current" not in set(select(both, "terminal_h_sweep")["config_hash"])
    assert "current" in set(select(both, "dg_epochs")["config_hash"])


def test_grouped_prompt_runs_serve_the_interaction_matched_rows():
    """The runner records a grouped method's match=interactions run as its prompt-matched
    run (one hash); the interaction-matched table must find it there, and must not take
    a single-sample method's prompt-matched run for its interaction-matched one."""
    from tpo_bench.analysis.paper.experiments import matches

    df = results_table().assign(match_k=8)
    df = df[~((df["match"] == "interactions") & (df["algo.k"] == 8))]
    block = {"task": "seq", "H": 7, "match": "interactions"}
    for algo, want in (("tpo", {"prompts"}), ("grpo", {"prompts"}), ("ppo", {"interactions"})):
        got = df[matches(df, {**block, "algo": algo})]
        assert set(got["match"]) == want, algo
    # with match_k = 4 a K = 8 method's prompt run is not interaction-matched
    df4 = df.assign(match_k=4)
    assert df4[matches(df4, {**block, "algo": "tpo"})].empty


def test_mnist_validation_split_runs_stay_apart_from_the_test_set_runs():
    from tpo_bench.analysis.paper.experiments import select

    df = results_table()
    df = df[df["experiment"] != "mnist_holdout"]
    mn = df[df["experiment"] == "mnist"]
    held = mn.assign(experiment="mnist_holdout", config_hash=mn["config_hash"] + "h",
                     **{"task.holdout": 10000})
    both = pd.concat([df, held], ignore_index=True)
    assert set(select(both, "mnist")["config_hash"]) == set(mn["config_hash"])
    assert set(select(both, "mnist_holdout")["config_hash"]) == set(held["config_hash"])
    # unlabelled holdout runs are not borrowed into the test-set comparison either
    stray = held.assign(experiment="other")
    assert set(select(pd.concat([df, stray]), "mnist")["config_hash"]) == set(mn["config_hash"])


@pytest.mark.slow  # long in process
def test_report_validation_split_table_and_findings(tmp_path, no_figures):
    df = results_table()
    mn = df[df["experiment"] == "mnist"]
    held = mn.assign(experiment="mnist_holdout", config_hash=mn["config_hash"] + "h",
                     **{"task.holdout": 10000, "test_error": mn["error"] + 0.01})
    res = tmp_path / "results.parquet"
    pd.concat([held], ignore_index=True).to_parquet(res)
    # the committed layout: the report, its figures and the hand-written findings together
    (tmp_path / "reproduction").mkdir()
    (tmp_path / "reproduction" / "findings.md").write_text("## What we found\n\nThe test file is harder.\n")
    out = tmp_path / "reproduction" / "REPRODUCTION.md"
    assert report.main(["--results", str(res), "--out", str(out)]) == 0
    text = out.read_text()
    assert "The test file is harder." in text.split("(`hero`)")[0]  # after the summary, before the sections
    section = text.split("(`mnist_holdout`)")[1].split("\n## ")[0]
    tpo = next(l for l in section.splitlines() if l.startswith("| tpo |"))
    assert "| +1.00 ± 0.00 |" in tpo and "| 3 |" in tpo
    assert "validation split" in section and "test file" in section
    assert report.main(["--results", str(res), "--out", str(out),
                        "--findings", str(tmp_path / "none.md")]) == 2


# ---- the summary counts each paper number and each run once ----

def summary_table(text: str) -> dict:
    """result -> {column: cell} of the report's summary table."""
    after = text.split("## Summary\n")[1].lstrip("\n").splitlines()
    block = after[:next(i for i, l in enumerate(after) if not l.startswith("|"))]
    head = [c.strip() for c in block[0].strip("|").split("|")]
    return {cells[0]: dict(zip(head, cells)) for cells in
            ([c.strip() for c in l.strip("|").split("|")] for l in block[2:])}


def paper_rows(p, *picks):
    """Rows of paper_numbers.csv by (experiment, algo, H, match, value)."""
    out = []
    for exp, algo, h, match, value in picks:
        hit = p[(p["experiment"] == exp) & (p["algo"] == algo) & (p["H"] == h) & (p["match"] == match)
                & (p["value"] == value) & (p["kind"] == "number")]
        assert len(hit) == 1, (exp, algo, h, match, value)
        out.append(hit)
    return pd.concat(out, ignore_index=True)


@pytest.fixture(scope="module")
def shared_runs_report(tmp_path_factory):
    """The H sweep and the ablations on one table, where the ablations' TPO and GRPO-no-KL
    are the H sweep's runs and a grouped method's interaction-matched row is its
    prompt-matched run, judged against six paper rows, one a reprint."""
    df = results_table().assign(match_k=8)
    df = df[df["experiment"].isin(["terminal_h_sweep", "ablations"])]
    df = df[~((df["match"] == "interactions") & (df["algo.k"] == 8))]
    p = report.load_paper()
    paper = paper_rows(p, ("terminal_h_sweep", "tpo", "10", "prompts", "7.4"),
                       ("terminal_h_sweep", "tpo", "10", "interactions", "19.0"),
                       ("terminal_h_sweep", "grpo_no_kl", "10", "prompts", ">95"),
                       ("terminal_h_sweep", "grpo", "10", "prompts", "50.4"),
                       ("ablations", "tpo", "10", "prompts", "7.4"),
                       ("ablations", "grpo_no_kl", "10", "prompts", ">99"))
    paper.loc[paper["value"] == ">95", "seeds"] = "3"  # as many seeds as ours: not "below"
    tmp = tmp_path_factory.mktemp("shared")
    with pytest.MonkeyPatch.context() as mp:
        name_figures(mp, seeds=False)  # the per-seed figure is drawn: a test below reads it
        text = report.build(df, tmp / "R.md", tmp / "figures", paper=paper)
    return df, text, tmp


@pytest.mark.slow  # long in process
def test_summary_counts_a_reprinted_number_once(shared_runs_report):
    _, text, _ = shared_runs_report
    s = summary_table(text)
    total = s["**total, each once**"]
    # 7.4 printed in both tables is one number; 19.0 (another replicate) and >95 / >99
    # (two printed values for one configuration) are numbers of their own, as is 50.4
    assert total["paper numbers"] == "5" and total["repeats"] == "1"
    assert s["`ablations`"]["paper numbers"] == "1" and s["`ablations`"]["repeats"] == "1"
    verdicts = sum(int(total[v]) for v in report.VERDICT_ORDER)
    # 3 seeds each; 19.0 is beyond the paper's own seeds of its configuration (mean 7.4)
    assert verdicts == 5 and total["inconclusive"] == "4" and total[V.BEYOND] == "1"
    abl = text.split("(`ablations`)")[1]
    tpo = next(l for l in abl.splitlines() if "| tpo |" in l)
    assert "repeats a row of `terminal_h_sweep`" in tpo
    assert "repeats a row" not in next(l for l in abl.splitlines() if "| grpo_no_kl |" in l)


def test_summary_counts_a_shared_run_once(shared_runs_report):
    df, text, _ = shared_runs_report
    s = summary_table(text)
    runs = {name: set(map(tuple, experiments_runs(df, name))) for name in ("terminal_h_sweep", "ablations")}
    shared = runs["terminal_h_sweep"] & runs["ablations"]
    assert shared  # the fixture really shares runs
    assert s["`terminal_h_sweep`"]["runs"] == str(len(runs["terminal_h_sweep"]))
    assert s["`ablations`"]["runs"] == str(len(runs["ablations"]))
    assert s["`ablations`"]["runs counted here"] == str(len(runs["ablations"] - shared))
    assert s["**total, each once**"]["runs counted here"] == str(len(runs["terminal_h_sweep"] | runs["ablations"]))
    # two printed values on each of two sets of runs; GRPO's 50.4 alone on its own
    assert "4 of the 5 run-based verdicts on paper numbers share their runs" in text
    assert "3 distinct sets of runs" in text


def experiments_runs(df, name):
    from tpo_bench.analysis.paper.experiments import select

    return select(df, name)[["config_hash", "seed"]].drop_duplicates().itertuples(index=False)


def test_summary_marks_rows_below_the_papers_seeds(shared_runs_report):
    _, text, _ = shared_runs_report
    s = summary_table(text)
    # ours: 3 seeds; the paper's 20, except the >95 row set to 3 above
    assert s["`terminal_h_sweep`"]["below paper's seeds"] == "3"
    assert s["`terminal_h_sweep`"]["our seeds"] == "3" and s["`terminal_h_sweep`"]["paper's seeds"] == "3–20"
    assert s["**total, each once**"]["below paper's seeds"] == "4"  # the repeat is not counted again


def test_summary_counts_formula_checks_apart(tmp_path, no_figures):
    df = results_table()
    df = df[df["experiment"] == "tabular_multi"]
    p = report.load_paper()
    paper = p[p["experiment"] == "tabular_multi"]
    assert (paper["metric"] == "weight_p0.1").sum() == 3
    text = report.build(df, tmp_path / "R.md", tmp_path / "figures", paper=paper)
    total = summary_table(text)["**total, each once**"]
    # the weights come from the science page's formulas: three formula checks, none a run-based "reproduced"
    assert total[V.FORMULA] == "3" and total[V.REPRODUCED] == "0"
    assert total["paper numbers"] == "3" and total["claims"] == str((paper["kind"] == "ordering").sum())
    assert sum(int(total[v]) for v in report.VERDICT_ORDER) == int(total["claims"])
    assert "formula checks apart: 3" in text


def test_report_draws_the_per_seed_distributions(shared_runs_report):
    _, text, tmp = shared_runs_report
    links = re.findall(r"!\[terminal_seeds\]\(([^)]+)\)", text)
    assert links == ["figures/terminal_seeds.png"]  # one figure, in the first section with the seeds
    assert (tmp / links[0]).is_file() and (tmp / links[0]).with_suffix(".pdf").is_file()
    assert text.index("terminal_seeds.png") < text.index("(`ablations`)")


def test_summary_counts_verdicts_once_per_set_of_runs(shared_runs_report):
    # 7.4 and 19.0 rest on one set of TPO runs, >95 and >99 on one of GRPO without KL:
    # four inconclusive verdicts on paper numbers and 19.0 beyond the paper's own seeds,
    # three sets of runs
    _, text, _ = shared_runs_report
    line = next(l for l in text.splitlines() if "counted once per set of runs" in l)
    assert line.endswith(": 3 inconclusive, 1 beyond the paper's own seeds.")


def test_an_unbounded_interval_is_printed_not_a_crash():
    """One seed of a row gives an interval without bounds: the report says so."""
    from tpo_bench.analysis.paper.report import number_text
    assert (number_text(float("-inf")), number_text(float("inf")), number_text(12345.4), number_text(0.012345)) == ("-∞", "∞", "12345", "0.0123")


def test_number_text_never_writes_a_rounded_value_as_an_exponent():
    """Per-seed finals near 100 % at two digits read as 100, not 1e+02; small values keep
    their digits."""
    assert [report.number_text(v, 2) for v in (99.7, 9.96, 0.00039, 5.414)] == ["100", "10", "0.00039", "5.4"]
    assert report.number_text(99.96) == "100" and report.number_text(None) == "never"
