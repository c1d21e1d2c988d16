"""The leaderboard's statistics (analysis/leaderboard.py) against worked examples computed by
hand, the stratified bootstrap's structure and coverage, and the command end to end on a
small table whose every number is known."""
import math
import re

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis import leaderboard as lb
from tpo_bench.analysis import plot
from conftest import compose, run_bench


# ---------------------------------------------------------------- worked examples


def test_iqm_trims_a_quarter_from_each_end_of_the_flattened_scores():
    # n = 8: floor(0.25 * 8) = 2 cut from each end -> mean(1, 2, 3, 10) = 4
    assert lb.iqm([0, 0, 1, 2, 3, 10, 20, 100]) == 4.0
    # the same values as a runs x tasks matrix: flattened first (axis=None)
    assert lb.iqm(np.array([[100, 0], [3, 20], [0, 1], [10, 2]])) == 4.0
    # n = 5: floor(1.25) = 1 -> mean(2, 3, 4) = 3; n = 3: floor(0.75) = 0 -> the plain mean
    assert lb.iqm([1, 2, 3, 4, 100]) == 3.0
    assert lb.iqm([0, 1, 5]) == 2.0
    # n = 7: floor(1.75) = 1 -> mean(1, 2, 4, 8, 16) = 6.2
    assert lb.iqm([0, 1, 2, 4, 8, 16, 1000]) == pytest.approx(6.2)
    assert lb.trim_mean([0, 0, 1, 2, 3, 10, 20, 100], 0.0) == 17.0
    with pytest.raises(ValueError):
        lb.trim_mean([1, 2], 0.5)


def test_iqm_of_resample_counts_is_the_iqm_of_the_resampled_values():
    rng = np.random.default_rng(1)
    values = np.round(rng.normal(size=13), 1)  # ties on purpose
    counts = rng.multinomial(13, np.full(13, 1 / 13), size=50)
    got = lb.trim_mean_counts(values, counts, lb.IQM_CUT)
    want = [lb.iqm(np.repeat(values, c)) for c in counts]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # the identity resample (each run once) is the data's own IQM
    assert lb.trim_mean_counts(values, np.ones((1, 13), int), lb.IQM_CUT)[0] == pytest.approx(lb.iqm(values))


def test_probability_of_improvement_counts_ties_one_half():
    # x = 1: beats 0 only (1 of 3); x = 2: ties 2, 2 (1/2 + 1/2), beats 0 (2); x = 3: beats all (3)
    x, y = [1, 2, 3], [2, 2, 0]
    assert lb.task_improvement(x, y) == pytest.approx(6 / 9)
    assert lb.task_improvement(y, x) == pytest.approx(3 / 9)  # P(X > Y) + P(Y > X) = 1
    # averaged over tasks, each weighing the same: (2/3 + 0) / 2
    assert lb.probability_of_improvement([x, [0, 0]], [y, [1, 1, 1]]) == pytest.approx(1 / 3)
    # a method against itself: every comparison a tie or cancelled by its mirror
    assert lb.probability_of_improvement([[0.1, 0.5, 0.5]], [[0.1, 0.5, 0.5]]) == 0.5
    assert lb.task_improvement([1.0], [1.0]) == 0.5


def test_performance_profile_counts_scores_strictly_above_tau():
    tasks = [[0.1, 0.5, 0.9], [0.5, 0.5, 1.0]]
    # pooled 6 runs; above 0.5: 0.9, 1.0 -> 2/6 (0.5 itself is not above 0.5)
    np.testing.assert_allclose(lb.performance_profile(tasks, [0.0, 0.5, 0.95, 1.0]),
                               [1.0, 2 / 6, 1 / 6, 0.0])


def test_ranks_share_the_mean_rank_on_ties():
    means = pd.DataFrame({"a": [0.9, 0.2], "b": [0.9, 0.5], "c": [0.1, 0.8]}, index=["t1", "t2"])
    ranks = lb.task_ranks(means)
    assert ranks.loc["t1"].tolist() == [1.5, 1.5, 3.0]
    assert ranks.loc["t2"].tolist() == [3.0, 2.0, 1.0]
    assert ranks.mean().tolist() == [2.25, 1.75, 2.0]



def test_ranks_tie_scores_equal_up_to_rounding():
    # b and c compute one update: equal up to float rounding (1e-10 apart); d is truly lower
    x = 0.7
    means = pd.DataFrame({"a": [0.9], "b": [x], "c": [x * (1 - 1e-10)], "d": [x * (1 - 1e-6)]})
    assert lb.task_ranks(means).loc[0].tolist() == [1.0, 2.5, 2.5, 4.0]
    # chained in sorted order, the tolerance is relative to the values compared
    means = pd.DataFrame({"a": [1e-3], "b": [1e-3 + 1e-13], "c": [1e-3 + 1e-11]})
    assert lb.task_ranks(means).loc[0].tolist() == [2.5, 2.5, 1.0]

# ---------------------------------------------------------------- the stratified bootstrap


def test_stratified_bootstrap_resamples_within_each_task():
    rng = np.random.default_rng(0)
    blocks = lb.resample_counts([3, 5, 1], 200, rng)
    assert [b.shape for b in blocks] == [(200, 3), (200, 5), (200, 1)]
    assert all((b.sum(axis=1) == n).all() for b, n in zip(blocks, [3, 5, 1]))
    # Each task's runs all score the same, tasks differ: a resample within tasks is the
    # data again, so every statistic's interval is the point. Across tasks it would not be.
    tasks = [np.zeros(4), np.ones(4), np.full(4, 2.0), np.full(4, 3.0)]
    ci = lb.iqm_ci(tasks, reps=500)
    assert ci.point == ci.lo == ci.hi == 1.5
    point, lo, hi = lb.profile_ci(tasks, [0.5, 1.5, 2.5], reps=500)
    np.testing.assert_array_equal(point, [0.75, 0.5, 0.25])
    np.testing.assert_array_equal(lo, point)
    np.testing.assert_array_equal(hi, point)
    other = [np.full(4, 0.5), np.full(4, 1.0), np.full(4, 3.0), np.full(4, 1.0)]
    poi = lb.poi_ci(tasks, other, reps=500)  # per task 0, 1/2, 0, 1
    assert poi.point == poi.lo == poi.hi == 0.375


def test_paired_bootstrap_draws_the_same_seeds_for_both():
    x = [np.array([0.0, 1.0, 2.0, 3.0])]
    # X = Y: paired resamples compare each seed with itself, always 1/2; unpaired ones vary
    paired = lb.poi_ci(x, x, paired=True, reps=300)
    assert paired.lo == paired.hi == 0.5
    unpaired = lb.poi_ci(x, x, paired=False, reps=300)
    assert unpaired.lo < 0.5 < unpaired.hi
    with pytest.raises(ValueError, match="as many runs"):
        lb.poi_ci(x, [np.zeros(3)], paired=True)


def test_bootstrap_is_reproducible_from_its_seed():
    tasks = [np.random.default_rng(4).normal(size=6) for _ in range(3)]
    assert lb.iqm_ci(tasks, reps=300, seed=7) == lb.iqm_ci(tasks, reps=300, seed=7)
    assert lb.iqm_ci(tasks, reps=300, seed=7) != lb.iqm_ci(tasks, reps=300, seed=8)


def _phi(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def test_intervals_cover_the_truth_about_as_often_as_they_say():
    """95 % intervals over 200 simulated studies: IQM of a mixture symmetric about 0 (three
    tasks N(-1, 1), N(0, 1), N(1, 1), 10 runs each: its IQM is 0), and P(X > Y) for
    X ~ N(0.5, 1), Y ~ N(0, 1) on two tasks (Phi(0.5 / sqrt 2) = 0.638). A percentile
    bootstrap with 10 runs per task undercovers a little; a broken one (no resampling,
    across-task resampling that adds the between-task spread) misses by far."""
    rng = np.random.default_rng(2021)
    truth = _phi(0.5 / math.sqrt(2))
    iqm_hits = poi_hits = 0
    studies = 200
    for i in range(studies):
        tasks = [rng.normal(mu, 1, size=10) for mu in (-1, 0, 1)]
        ci = lb.iqm_ci(tasks, reps=1000, seed=i)
        iqm_hits += ci.lo <= 0 <= ci.hi
        x = [rng.normal(0.5, 1, size=10) for _ in range(2)]
        y = [rng.normal(0.0, 1, size=10) for _ in range(2)]
        p = lb.poi_ci(x, y, reps=1000, seed=i)
        poi_hits += p.lo <= truth <= p.hi
    assert 0.88 <= iqm_hits / studies <= 0.99, iqm_hits
    assert 0.88 <= poi_hits / studies <= 0.99, poi_hits


# Three methods' 5-run x 7-task score matrices, and what rliable 1.2.0 computed on them (run
# once in a throwaway venv beside pandas 2.3.3 and arch 7.2.0: it does not import beside
# pandas 3; get_interval_estimates with aggregate_iqm and probability_of_improvement,
# create_performance_profile at taus 0, 0.1, ..., 1; 2,000 resamples).
RLIABLE_A = [[.8, 1., .6, .9, .6, .7, .4], [.8, .8, .5, .8, .5, .8, .8], [.7, .7, .4, .4, .8, .9, .8],
             [.9, .9, .9, .6, .7, .7, .5], [.6, .9, .4, .6, .9, .9, .9]]
RLIABLE_B = [[.8, .2, .5, .4, .5, .3, .6], [.4, .6, .3, .8, .5, .6, .5], [.6, .6, .5, .8, .4, .5, .3],
             [.2, .8, .7, .7, .4, .2, .5], [.4, .3, .3, .5, .6, .7, .7]]
RLIABLE_C = [[.5, .1, .4, .2, .4, .1, .3], [.5, .4, .4, .2, .2, .2, .6], [.1, .3, .4, .5, .4, .5, .2],
             [.1, .3, .6, .3, .3, 0., .5], [.6, .2, .4, .5, .3, .5, .2]]
RLIABLE = {  # point [95 % interval]
    "iqm": {"A": (0.7421052631578948, 0.67368421, 0.80526316),
            "B": (0.5052631578947369, 0.43684211, 0.57368421),
            "C": (0.3368421052631579, 0.27368421, 0.40526316)},
    "poi": {("A", "B"): (0.7942857142857143, 0.6885, 0.88857143),
            ("A", "C"): (0.9228571428571428, 0.84857143, 0.97428571),
            ("B", "B"): (0.5, 0.36857143, 0.62857143)},
    "profile": {"A": [1, 1, 1, 1, 0.8857, 0.8, 0.6571, 0.5143, 0.2857, 0.0286, 0],
                "B": [1, 1, 0.9143, 0.7714, 0.6286, 0.4, 0.2286, 0.1143, 0, 0, 0],
                "C": [0.9714, 0.8571, 0.6571, 0.4857, 0.2857, 0.0857, 0, 0, 0, 0, 0]},
}


def test_estimates_equal_rliables_on_its_own_matrices():
    """Point estimates to the last digit; intervals within Monte Carlo noise (rliable's
    interval over X and Y resamples them independently: P(B > B) is not pinned at 1/2)."""
    tasks = {k: [np.array(m)[:, t] for t in range(7)]
             for k, m in (("A", RLIABLE_A), ("B", RLIABLE_B), ("C", RLIABLE_C))}
    for k, (point, lo, hi) in RLIABLE["iqm"].items():
        ci = lb.iqm_ci(tasks[k], reps=5000)
        assert ci.point == pytest.approx(point, abs=1e-12)
        assert (ci.lo, ci.hi) == pytest.approx((lo, hi), abs=0.02)
    for (x, y), (point, lo, hi) in RLIABLE["poi"].items():
        ci = lb.poi_ci(tasks[x], tasks[y], reps=5000)
        assert ci.point == pytest.approx(point, abs=1e-12)
        assert (ci.lo, ci.hi) == pytest.approx((lo, hi), abs=0.02)
    for k, profile in RLIABLE["profile"].items():
        np.testing.assert_allclose(lb.performance_profile(tasks[k], np.linspace(0, 1, 11)),
                                   profile, atol=1e-4)


# ---------------------------------------------------------------- from the collected table


def _runs_table(spec, steps=20, initial=None):
    """A collected-table stand-in: spec {(task, algo): [final error per seed]}; every run
    starts at its task's initial error (step 0), sits at 0.9 x that until the last 10 %
    of its steps, then at its final error."""
    rows = []
    for (task, algo), finals in spec.items():
        e0 = (initial or {}).get(task, 1.0)
        for seed, final in enumerate(finals):
            err = np.full(steps, 0.9 * e0)
            err[0] = e0
            err[-max(1, steps // 10):] = final
            rows.append(pd.DataFrame({"step": np.arange(steps), "error": err, "seed": seed,
                                      "task.name": task, "algo.name": algo,
                                      "config_hash": f"{task}-{algo}", "task.episodes": steps,
                                      "experiment": "leaderboard"}))
    return pd.concat(rows, ignore_index=True)


def test_final_error_is_the_mean_over_the_last_tenth_of_the_logged_rows():
    df = pd.DataFrame({"step": np.arange(20), "error": np.arange(20) / 100, "seed": 0,
                       "task.name": "t", "algo.name": "a", "config_hash": "h"})
    [run] = lb.final_errors(df).itertuples()
    assert run.final_error == pytest.approx(0.185)  # steps 18, 19
    assert run.initial_error == 0.0 and run.first_step == 0
    assert lb.final_errors(df, last_frac=0.0)["final_error"].iloc[0] == pytest.approx(0.19)
    assert lb.final_errors(df, last_frac=0.25)["final_error"].iloc[0] == pytest.approx(0.17)  # 15..19
    # MNIST: 51 evaluations (0, 200, ..., 10,000): ceil(5.1) = 6, the last 6 (9,000 .. 10,000)
    mn = df.iloc[:0].reindex(range(51)).assign(step=np.arange(0, 10_001, 200), error=np.arange(51.0),
                                                seed=0, **{"task.name": "m", "algo.name": "a", "config_hash": "h"})
    assert lb.final_errors(mn)["final_error"].iloc[0] == pytest.approx(np.mean(np.arange(45, 51)))


def test_normalisations():
    runs = pd.DataFrame({lb.TASK: ["t", "t", "u", "u"], lb.METHOD: ["a", "b", "a", "b"], "seed": 0,
                         "final_error": [0.2, 0.6, 0.25, 0.25], "initial_error": [0.8, 0.8, 0.5, 0.5],
                         "first_step": 0})
    np.testing.assert_allclose(lb.normalise(runs, "initial")["score"], [0.75, 0.25, 0.5, 0.5])
    np.testing.assert_allclose(lb.normalise(runs, "one_minus_error")["score"], [0.8, 0.4, 0.75, 0.75])
    # min-max over the task's runs; a task where all agree: 1
    np.testing.assert_allclose(lb.normalise(runs, "minmax")["score"], [1.0, 0.0, 1.0, 1.0])
    with pytest.raises(lb.Refused, match="step 0"):
        lb.normalise(runs.assign(first_step=5), "initial")


def test_the_table_is_refused_where_cells_do_not_compare():
    df = _runs_table({("t", "tpo"): [0.1, 0.2], ("t", "grpo"): [0.3, 0.4], ("u", "tpo"): [0.1, 0.1]})
    with pytest.raises(lb.Refused, match="grpo on u"):
        lb.scores_from_table(df)
    runs, _ = lb.scores_from_table(df, methods=["tpo"])
    assert set(runs[lb.METHOD]) == {"tpo"}
    two = pd.concat([df, df[df["task.name"] == "t"].assign(config_hash="other", seed=lambda d: d.seed + 5)])
    with pytest.raises(lb.Refused, match="several configurations"):
        lb.scores_from_table(two, tasks=["t"])
    runs, notes = lb.scores_from_table(two, tasks=["t"], pick=True)
    assert any("took config" in n for n in notes)
    with pytest.raises(lb.Refused, match="not in the table"):
        lb.scores_from_table(df, tasks=["nope"])


# The end-to-end example: three tasks of different untrained errors, three methods, 4 seeds.
INITIAL = {"dense": 0.5, "terminal": 1.0, "bandit": 0.75}
DG_FRACTIONS = [0.125, 0.25, 0.5, 0.875]  # final error / initial error, per seed (exact in binary)


def _e2e_table():
    spec = {}
    for task, e0 in INITIAL.items():
        spec[(task, "tpo")] = [0.0] * 4  # score 1 everywhere
        spec[(task, "grpo")] = [e0 / 2] * 4  # score 1/2 everywhere
        spec[(task, "dg")] = [e0 * f for f in DG_FRACTIONS]  # scores 7/8, 3/4, 1/2, 1/8
    return _runs_table(spec, initial=INITIAL)


def test_leaderboard_numbers_on_a_table_known_by_hand():
    runs, notes = lb.scores_from_table(_e2e_table())
    assert not notes
    board = lb.build_board(runs, reps=500)
    t = board.table
    assert list(t.index) == ["tpo", "dg", "grpo"]
    # tpo: every score 1; grpo: every score 1/2; dg: 12 pooled scores, 3 cut from each end
    # of (1/8 x3, 1/2 x3, 3/4 x3, 7/8 x3): mean(1/2, 3/4) = 5/8
    assert t.loc["tpo", ["iqm", "iqm_lo", "iqm_hi"]].tolist() == [1.0, 1.0, 1.0]
    assert t.loc["grpo", ["iqm", "iqm_lo", "iqm_hi"]].tolist() == [0.5, 0.5, 0.5]
    assert t.loc["dg", "iqm"] == 0.625
    assert t.loc["dg", "iqm_lo"] < 0.625 < t.loc["dg", "iqm_hi"]
    # P(dg > grpo) per task: 7/8 and 3/4 win, 1/2 ties, 1/8 loses: 2.5 / 4
    assert t.loc["dg", "p_grpo"] == 0.625
    assert t.loc["tpo", "p_grpo"] == 1.0 and t.loc["grpo", "p_tpo"] == 0.0 and t.loc["dg", "p_tpo"] == 0.0
    assert math.isnan(t.loc["tpo", "p_tpo_lo"])  # a method is not compared with itself
    assert board.poi.loc["grpo", "dg"] == 0.375
    assert t["mean_rank"].tolist() == [1.0, 2.0, 3.0]
    assert t["runs"].tolist() == [12, 12, 12] and t["tasks"].tolist() == [3, 3, 3]
    # profile at tau = 0.6: tpo all, dg 7/8 and 3/4 (half), grpo none
    i = int(np.argmin(abs(board.taus - 0.6)))
    assert [board.profiles[m][0][i] for m in ("tpo", "dg", "grpo")] == [1.0, 0.5, 0.0]
    text = lb.markdown(board)
    assert "| tpo | 1.000 [1.000, 1.000] | 1.00 [1.00, 1.00] | — | 1.00 | 12 | 3 |" in text
    assert "| dg | 0.625 [" in text
    assert "| grpo | 0.500 [0.500, 0.500] | — | 0.00 [0.00, 0.00] | 3.00 | 12 | 3 |" in text
    # per task: the untrained error, mean final error (%) +- SE (ddof 0) and rank. dg on dense: errors 0.5 x
    # (1/8, 1/4, 1/2, 7/8) = 1/16, 1/8, 1/4, 7/16: mean 7/32 = 21.875 %, deviations
    # -5/32, -3/32, 1/32, 7/32: SE = sqrt(84/1024 / 4) / 2 = 7.16 %
    assert "| dense | 50.00 | 0.00 ± 0.00 (1) | 21.88 ± 7.16 (2) | 25.00 ± 0.00 (3) |" in text


def test_the_board_says_what_each_method_spent_in_rollouts():
    """Prompt-matched: PG draws 1 answer per prompt where GRPO draws K = 8, DAPO tops up."""
    df = _runs_table({(task, m): [0.1, 0.2] for task in ("t", "u") for m in ("grpo", "pg", "dapo")})
    per_step = {("t", "grpo"): 800, ("t", "pg"): 100, ("t", "dapo"): 3200,
                ("u", "grpo"): 400, ("u", "pg"): 50, ("u", "dapo"): 800}
    df["rollouts"] = [per_step[(t_, a)] * (s + 1) for t_, a, s in zip(df["task.name"], df["algo.name"], df["step"])]
    runs, _ = lb.scores_from_table(df)
    assert runs.set_index([lb.TASK, lb.METHOD, "seed"]).loc[("t", "dapo", 0), "rollouts"] == 3200 * 20
    t = lb.build_board(runs, reps=200).table
    # per task over the median method (grpo on both): t: 1, 1/8, 4; u: 1, 1/8, 2
    assert t.loc["grpo", "rollouts_rel"] == 1.0
    assert t.loc["pg", "rollouts_rel"] == 0.125
    assert t.loc["dapo", "rollouts_rel"] == 3.0
    text = lb.markdown(lb.build_board(runs, reps=200))
    assert "rollouts (× median)" in text and re.search(r"^\| dapo \|.*\| 3\.00 \|$", text, re.M), text
    assert "rollouts" not in lb.markdown(lb.build_board(lb.scores_from_table(_e2e_table())[0], reps=50))


@pytest.mark.slow  # takes seconds in process
def test_cli_writes_the_figure_and_table(tmp_path, capsys):
    res = tmp_path / "results.parquet"
    _e2e_table().to_parquet(res)
    out = tmp_path / "lb"
    assert lb.main(["--results", str(res), "--out", str(out), "--reps", "300"]) == 0
    printed = capsys.readouterr().out
    md = (out / "leaderboard.md").read_text()
    assert printed == md and "| tpo | 1.000 [1.000, 1.000]" in md
    assert (out / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "leaderboard.pdf").read_bytes()[:4] == b"%PDF"
    # the same through plot.py, listed there
    assert plot.main(["--list"]) == 0
    assert "leaderboard" in capsys.readouterr().out
    fig_out = tmp_path / "plots"
    assert plot.main(["--figure", "leaderboard", "--results", str(res), "--out", str(fig_out)]) == 0
    assert {p.name for p in fig_out.iterdir()} == {"leaderboard.png", "leaderboard.pdf", "leaderboard.md"}
    # bad input: exit 2 with one line, nothing written
    assert lb.main(["--results", str(tmp_path / "missing.parquet"), "--out", str(tmp_path / "x")]) == 2
    assert "not found" in capsys.readouterr().err
    _e2e_table().iloc[:0].to_parquet(tmp_path / "empty.parquet")
    assert lb.main(["--results", str(tmp_path / "empty.parquet"), "--out", str(tmp_path / "x")]) == 2
    assert "no rows" in capsys.readouterr().err
    assert lb.main(["--results", str(res), "--out", str(tmp_path / "x"), "--experiment", "other"]) == 2
    assert "no runs to rank" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_an_unfinished_run_is_refused_by_name_and_the_rest_ranked(tmp_path, capsys):
    df = _e2e_table()
    cut = df[~((df["algo.name"] == "dg") & (df["seed"] == 3) & (df["task.name"] == "dense") & (df["step"] > 10))]
    res = tmp_path / "results.parquet"
    cut.to_parquet(res)
    assert lb.main(["--results", str(res), "--out", str(tmp_path / "lb"), "--reps", "100"]) == 1
    err = capsys.readouterr().err
    assert "refused dg on dense (config dense-dg) seed 3" in err
    assert "| dg | " in (tmp_path / "lb" / "leaderboard.md").read_text()


# ---------------------------------------------------------------- the preset


METHODS = ("tpo", "tpo_lennorm", "grpo", "grpo_no_kl", "dr_grpo", "dapo", "rloo", "gspo", "cispo", "gpg",
           "maxrl", "reinforce_pp_baseline", "lpo", "lpo_reverse", "dg", "pg", "ppo")
CELLS = ("terminal_h7", "dense_v8", "sequential_reverse_flip", "mnist", "tabular_multi")


@pytest.mark.slow
def test_the_preset_lists_every_method_on_every_cell(tmp_path):
    proc = run_bench("-m", "+experiment=leaderboard", "dry_run=true", f"output_root={tmp_path}")
    n = len(CELLS) * len(METHODS) * 5
    assert f"[dry run] {n} valid jobs ({n} runs)" in proc.stdout
    jobs = [dict(kv.split("=", 1) for kv in line.split()) for line in proc.stdout.splitlines()
            if line.startswith("  seed=")]
    assert len(jobs) == n
    assert {j["+experiment/leaderboard"] for j in jobs} == set(CELLS)
    assert {j["algo"] for j in jobs} == set(METHODS)
    assert [j["seed"] for j in jobs[:len(CELLS) * len(METHODS)]] == ["0"] * (len(CELLS) * len(METHODS))  # seed-major
    # The shrink and a cell's config, in process: the job list the sweeper expands
    # (sweep_jobs) and the config a run composes.
    from dev.speed import sweep_jobs

    one = sweep_jobs("+experiment=leaderboard", "seeds=1", "task.episodes=3")
    assert len(one) == n // 5 and {o for job in one for o in job if o.startswith("seed=")} == {"seed=0"}
    cfg = compose("+experiment=leaderboard", "+experiment/leaderboard=sequential_reverse_flip")
    assert cfg["task"] == {**cfg["task"], "name": "sequential_reverse_flip", "reward": "sequential",
                           "target": "reverse_flip", "sequence_length": 10, "vocab_size": 2, "episodes": 60}
    assert cfg["experiment"] == "leaderboard"


@pytest.mark.slow
def test_the_preset_runs_end_to_end_small(tmp_path):
    """The leaderboard preset's smoke run: the preset itself (three of its cells, two
    methods, one seed, two episodes), collected and ranked by the leaderboard's own command."""
    import subprocess
    import sys

    from conftest import REPO, run_bench

    out = tmp_path / "runs"
    run_bench("-m", "+experiment=leaderboard", "seeds=1", "task.episodes=2", "algo=tpo,grpo",
              "+experiment/leaderboard=terminal_h7,dense_v8,tabular_multi", "hydra/launcher=local",
              "hydra.launcher.n_jobs=1", "threads=1", f"output_root={out}")  # several workers: test_integrity_faults
    table = tmp_path / "results.parquet"
    # collect.py's main in process (other tests run the script itself)
    from tpo_bench.analysis import collect

    assert collect.main([str(out), "--out", str(table)]) == 0
    proc = subprocess.run([sys.executable, str(REPO / "analysis" / "leaderboard.py"), "--results",
                           str(table), "--out", str(tmp_path / "lb"), "--reps", "200"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    for method in ("tpo", "grpo"):
        assert re.search(rf"^\| `?{method}`? \|", md, re.M), md
    assert (tmp_path / "lb" / "leaderboard.png").stat().st_size > 0
