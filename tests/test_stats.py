import math

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis import plot, stats


def long(curves: dict, steps=None) -> pd.DataFrame:
    """{seed: [errors]} -> long rows like the results table."""
    rows = []
    for seed, errs in curves.items():
        for i, e in enumerate(errs):
            rows.append({"seed": seed, "step": (steps or range(len(errs)))[i], "error": e})
    return pd.DataFrame(rows)


def test_standard_error_uses_ddof_0():
    assert stats.standard_error([0.0, 1.0]) == pytest.approx(0.5 / math.sqrt(2))
    assert stats.standard_error([0.3]) == 0.0
    assert math.isnan(stats.standard_error([]))
    wide = stats.seed_curves(long({0: [0.0, 0.2], 1: [1.0, 0.4]}))
    mean, se = stats.mean_se(wide)
    assert mean.tolist() == pytest.approx([0.5, 0.3])
    assert se.tolist() == pytest.approx([0.5 / math.sqrt(2), 0.1 / math.sqrt(2)])


def test_plot_uses_the_same_functions():
    assert plot.seed_curves is stats.seed_curves and plot.mean_se is stats.mean_se
    assert plot.steps_to_threshold is stats.steps_to_threshold


def test_bootstrap_deterministic_and_contains_the_mean():
    v = np.array([0.05, 0.07, 0.06, 0.12, 0.02, 0.09])
    a, b = stats.bootstrap_ci(v), stats.bootstrap_ci(v)
    assert a == b  # seeded: the report is reproducible
    lo, hi = a
    assert lo < v.mean() < hi
    assert v.min() <= lo and hi <= v.max()
    assert stats.bootstrap_ci([0.3]) == (0.3, 0.3)
    assert all(math.isnan(x) for x in stats.bootstrap_ci([]))
    wide90 = stats.bootstrap_ci(v, level=0.9)
    assert wide90[0] >= lo and wide90[1] <= hi


def test_final_stats_at_last_common_step():
    # Seed 1 logged one step more: the final value comes from step 2, which both logged.
    f = stats.final_stats(stats.seed_curves(long({0: [0.5, 0.2, 0.1], 1: [0.5, 0.3, 0.3, 0.9]})))
    assert f.step == 2 and f.n_seeds == 2
    assert f.mean == pytest.approx(0.2) and f.se == pytest.approx(0.1 / math.sqrt(2))
    assert f.lo <= f.mean <= f.hi
    assert stats.final_stats(pd.DataFrame()) is None


def test_steps_to_threshold_paper_definition():
    assert stats.steps_to_threshold([0, 10, 20], [0.5, 0.005, 0.001], 0.01) == 10
    assert stats.steps_to_threshold([0, 10], [0.5, 0.01], 0.01) is None  # strictly below
    assert stats.steps_to_threshold([], [], 0.01) is None
    # The seed-mean curve, not single seeds: seed 0 dips at step 1, the mean only at 2.
    wide = stats.seed_curves(long({0: [0.5, 0.0, 0.0], 1: [0.5, 0.1, 0.01]}))
    assert stats.mean_steps_to_threshold(wide, 0.01) == 2
    never = stats.seed_curves(long({0: [0.5, 0.2], 1: [0.5, 0.3]}))
    assert stats.mean_steps_to_threshold(never, 0.01) is None


def test_seed_hits_censoring():
    wide = stats.seed_curves(long({0: [0.5, 0.005, 0.0], 1: [0.5, 0.2, 0.001], 2: [0.5, 0.4, 0.3]}))
    h = stats.seed_hits(wide, 0.01)
    assert (h.n_seeds, h.n_reached) == (3, 2)
    assert h.seeds == (0, 1) and h.steps == (1, 2)
    assert not h.all_reached
    assert h.median is None  # never a value for seed 2
    assert h.median_reached == 1.5
    assert h.last_step == 2
    assert "2/3 seeds reached" in h.describe() and "not by step 2" in h.describe()

    everyone = stats.seed_hits(wide[[0, 1]], 0.01)
    assert everyone.all_reached and everyone.median == 1.5
    assert "2/2 seeds reached, median 1.5" == everyone.describe()

    nobody = stats.seed_hits(wide[[2]], 0.01)
    assert nobody.n_reached == 0 and nobody.median_reached is None
    assert nobody.describe() == "0/1 seeds reached (by step 2)"


def test_seed_hits_with_uneven_logs():
    # Seed 1's log is longer and crosses after seed 0's log ended: with common=False it counts.
    wide = stats.seed_curves(long({0: [0.5, 0.3], 1: [0.5, 0.3, 0.2, 0.0]}), common=False)
    h = stats.seed_hits(wide, 0.01)
    assert h.n_reached == 1 and h.steps == (3,)


def test_steps_bootstrap_interval():
    same = stats.seed_curves(long({s: [0.5, 0.2, 0.0, 0.0] for s in range(4)}))
    assert stats.steps_bootstrap(same, 0.01)[:2] == (2, 2)
    never = stats.seed_curves(long({s: [0.5, 0.3] for s in range(3)}))
    assert stats.steps_bootstrap(never, 0.01)[:2] == (None, None)
    # One seed of two never crosses: a resample of it twice never crosses -> upper end "never".
    mixed = stats.seed_curves(long({0: [0.5, 0.0, 0.0], 1: [0.5, 0.5, 0.5]}))
    lo, hi = stats.steps_bootstrap(mixed, 0.01)[:2]
    assert lo == 1 and hi is None
    assert stats.steps_bootstrap(mixed, 0.01)[:2] == (lo, hi)  # deterministic
    assert stats.steps_bootstrap(pd.DataFrame(), 0.01)[:2] == (None, None)


def test_steps_bootstrap_se_is_the_statistics_spread():
    # Three seeds cross 5 % at step 1, one only at step 8. The seed-mean curve crosses
    # at 8 when the slow seed is drawn at all, else at 1: the statistic's SE is the
    # spread of that draw, sqrt(P(drawn) * P(not drawn)) * 7, not the per-seed SE.
    wide = stats.seed_curves(long({**{s: [0.5] + [0.0] * 9 for s in range(3)},
                                   3: [0.5] * 8 + [0.0] * 2}))
    lo, hi, se = stats.steps_bootstrap(wide, 0.05)
    p_drawn = 1 - (3 / 4) ** 4
    assert (lo, hi) == (1, 8)
    assert se == pytest.approx(7 * math.sqrt(p_drawn * (1 - p_drawn)), rel=0.03)
    assert se > 2 * stats.standard_error([1, 1, 1, 8])
    same = stats.seed_curves(long({s: [0.5, 0.2, 0.0] for s in range(3)}))
    assert stats.steps_bootstrap(same, 0.01)[2] == 0.0
    # A resample that never crosses has no step: no finite SE.
    mixed = stats.seed_curves(long({0: [0.5, 0.0, 0.0], 1: [0.5, 0.5, 0.5]}))
    assert stats.steps_bootstrap(mixed, 0.01)[2] is None


def test_moving_average_trailing():
    assert stats.moving_average(pd.Series([0.0, 3, 6, 9]), 2).tolist() == [0, 1.5, 4.5, 7.5]
    assert stats.moving_average([0.0, 3, 6, 9], 3).tolist() == [0, 1.5, 3, 6]
    wide = pd.DataFrame({0: [0.0, 2.0, 4.0], 1: [2.0, 2.0, 2.0]})
    sm = stats.moving_average(wide, 40)  # longer than the run: a running mean
    assert sm[0].tolist() == [0, 1, 2] and sm[1].tolist() == [2, 2, 2]
    assert stats.moving_average(wide, 1) is wide


def test_curve_mean():
    c = stats.curve_mean(stats.seed_curves(long({0: [0.4, 0.2], 1: [0.2, 0.0]})))
    assert c.mean == pytest.approx(0.2) and c.n_seeds == 2
    assert c.se == pytest.approx(0.1 / math.sqrt(2))
    assert stats.curve_mean(pd.DataFrame()) is None


def test_steps_by_seed_count_grows_with_a_slow_seed():
    """Seeds crossing at steps 1, 2 and 8: alone they cross at their own step (median 2);
    any pair holding the slow seed crosses only when the mean does."""
    steps = np.arange(10)
    curve = lambda hit: np.where(steps >= hit, 0.0, 0.05)  # noqa: E731
    wide = pd.DataFrame({0: curve(1), 1: curve(2), 2: curve(8)}, index=steps)
    # pairs: {0,1} -> 2, {0,2} -> 8, {1,2} -> 8 (mean 0.025 until the slow seed drops)
    assert stats.steps_by_seed_count(wide, 0.01) == (2, 8, 8)
    assert stats.steps_by_seed_count(wide.iloc[:5], 0.01) == (2, None, None)
    # many seeds: a bounded, reproducible sample of subsets
    big = pd.DataFrame({i: curve(1 + i % 7) for i in range(14)}, index=steps)
    a = stats.steps_by_seed_count(big, 0.01, max_subsets=50)
    assert len(a) == 14 and a == stats.steps_by_seed_count(big, 0.01, max_subsets=50)
    assert a[0] <= a[6] <= a[-1] == 6  # all 14: the two step-7 seeds alone keep the mean at 0.007


def test_subset_mean_tails_counts_ties_in_both_tails():
    # 2-seed subsets of (0, 0, 0, 100): three means of 0, three of 50
    v = [0.0, 0.0, 0.0, 100.0]
    assert stats.subset_mean_tails(v, 2, 0.0) == (0.5, 1.0)
    assert stats.subset_mean_tails(v, 2, 25.0) == (0.5, 0.5)
    assert stats.subset_mean_tails(v, 2, 50.0) == (1.0, 0.5)
    assert stats.subset_mean_tails(v, 2, 60.0) == (1.0, 0.0)
    assert stats.subset_mean_tails(v, 4, 25.0) == (1.0, 1.0)
    with pytest.raises(ValueError, match="n=5"):
        stats.subset_mean_tails(v, 5, 0.0)


def test_subset_mean_tails_draws_when_subsets_are_many():
    rng = np.random.default_rng(1)
    v = rng.exponential(size=30)
    exact = stats.subset_mean_tails(v, 3, float(np.median(v)))
    drawn = stats.subset_mean_tails(v, 3, float(np.median(v)), max_subsets=2000)
    assert drawn == stats.subset_mean_tails(v, 3, float(np.median(v)), max_subsets=2000)
    assert drawn != exact and drawn == pytest.approx(exact, abs=0.03)


def test_steps_at_seed_count_is_the_statistic_of_fewer_seeds():
    # four seeds below 1 % from step 1, one slow seed from step 3: every 2-seed subset
    # without the slow one (6 of 10) crosses at 1, the crossing of all 5 waits for it
    fast, slow = [0.5, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0]
    wide = pd.DataFrame({s: fast for s in range(4)} | {4: slow}, index=range(4))
    assert stats.mean_steps_to_threshold(wide) == 3
    value, lo, hi, se = stats.steps_at_seed_count(wide, 2)
    assert (value, lo, hi) == (1, 1, 3)
    assert se == pytest.approx(2 * math.sqrt(0.6 * 0.4))
    assert stats.steps_at_seed_count(wide, 5)[:3] == (3, 3, 3)
    never = wide.copy()
    never[4] = 0.5  # the slow seed never gets there: 4 of 10 subsets never cross
    assert stats.steps_at_seed_count(never, 2)[2:] == (None, None)
    with pytest.raises(ValueError, match="k=6"):
        stats.steps_at_seed_count(wide, 6)


def test_t_quantile_against_printed_tables():
    # Student's t tables: t(0.95; 1) = 6.314, t(0.95; 4) = 2.132, t(0.95; 19) = 1.729,
    # t(0.975; 9) = 2.262; a very large df tends to the normal's 1.645
    for q, df, want in ((0.95, 1, 6.314), (0.95, 4, 2.132), (0.95, 19, 1.729), (0.975, 9, 2.262),
                        (0.95, 100_000, 1.645)):
        assert stats.t_quantile(q, df) == pytest.approx(want, abs=1e-3)
    with pytest.raises(ValueError):
        stats.t_quantile(0.3, 4)


def test_t_interval():
    v = [1.0, 2.0, 3.0, 4.0, 5.0]  # mean 3, s = sqrt(2.5), t(0.95; 4) = 2.132
    lo, hi = stats.t_interval(v, 0.90)
    assert (lo + hi) / 2 == pytest.approx(3.0)
    assert (hi - lo) / 2 == pytest.approx(2.132 * math.sqrt(2.5) / math.sqrt(5), rel=1e-3)
    assert stats.t_interval([0.0, 0.0, 0.0]) == (0.0, 0.0)
    assert stats.t_interval([0.4]) == (-math.inf, math.inf)


def test_mean_difference_test():
    # 5 vs 5 fully separated: 2 of the C(10, 5) = 252 relabellings are as extreme
    assert stats.mean_difference_test([0] * 5, [100] * 5) == pytest.approx(2 / 252, abs=0.003)
    assert stats.mean_difference_test([0, 100, 0, 100], [100, 0, 100, 0]) == 1.0
    # two-sided: the same p whichever sample is first
    a, b = [0, 0, 0, 100, 100], [0, 100, 100, 100, 100, 100]
    assert stats.mean_difference_test(a, b) == pytest.approx(stats.mean_difference_test(b, a), abs=0.02)
    assert 0.1 < stats.mean_difference_test(a, b) < 0.6


def test_paired_sign_flip_test_is_one_sided_and_paired():
    # five pairs all favouring a: 1 of the 2^5 sign patterns is as extreme
    assert stats.paired_sign_flip_test([0] * 5, [1, 2, 3, 4, 5]) == pytest.approx(1 / 32)
    assert stats.paired_sign_flip_test([1, 2, 3, 4, 5], [0] * 5) == 1.0  # the other side
    # pairing: a constant shift of 1 inside pairs spread over 0..40 is significant paired,
    # though the two samples overlap almost entirely
    a = [0.0, 10.0, 20.0, 30.0, 40.0]
    assert stats.paired_sign_flip_test(a, [x + 1 for x in a]) == pytest.approx(1 / 32)
    assert stats.paired_sign_flip_test(a, [x + 1 for x in reversed(a)]) > 0.3
    # past the exact limit: sampled patterns, the same answer to sampling error
    n = stats.EXACT_SIGN_FLIPS + 2
    assert stats.paired_sign_flip_test([0] * n, [1] * n) == pytest.approx(1 / 10_001)


def test_rank_sum_test():
    # fully separated 5 vs 5: two-sided exact p = 2 / C(10, 5) = 2 / 252
    assert stats.rank_sum_test([0, 1, 2, 3, 4], [5, 6, 7, 8, 9]) == pytest.approx(2 / 252, abs=0.002)
    same = stats.rank_sum_test([0, 0, 100, 100], [0, 100, 0, 100])
    assert same > 0.9
    # ties: a 0-or-100 outcome, 1 of 6 solved against 5 of 6
    p = stats.rank_sum_test([0, 100, 100, 100, 100, 100], [0, 0, 0, 0, 0, 100])
    assert 0.01 < p < 0.2
