"""The registered analysis of the central claim: its statistics against independent
computations, its outcome words, and that it was fixed before the runs it judges."""
import ast
import itertools
import subprocess

import numpy as np
import pytest

from tpo_bench.analysis.paper import registered as R
from tpo_bench.analysis.paper import registered_ppo as P
from tpo_bench.analysis.paper import report, rule_dates

from conftest import REPO, terminal_summaries

REG = rule_dates.TERMINAL_H_SWEEP
BOTH = pytest.mark.parametrize("reg", report.REGISTERED, ids=lambda r: r.registration.name)


def _git(*args):
    got = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return got.stdout.strip() if got.returncode == 0 else None


@pytest.mark.slow  # reads git log
@BOTH
def test_the_registration_has_not_changed_since_its_commit(reg):
    r = reg.registration
    last = _git("log", "-1", "--format=%h %cI", "--", *r.files)
    if not last:
        pytest.skip("no git history here")
    changed = _git("log", "--format=%h %cI", f"{r.commit}~1..HEAD", "--", *r.files).splitlines()
    commit, date = changed[-1].split()
    assert commit.startswith(r.commit) or r.commit.startswith(commit)
    assert date == r.date
    for line in changed[:-1]:
        later = line.split()[0]
        assert any(later.startswith(c) or c.startswith(later) for c in r.runnable), (
            f"{', '.join(r.files)} changed in {later} after registration {r.commit}: a "
            "registered analysis is fixed before its runs; a new one needs a new registration")
        for f in r.files:
            before, after = _git("show", f"{r.commit}:{f}"), _git("show", f"{later}:{f}")
            assert _what_it_computes(before, f) == _what_it_computes(after, f), (
                f"{f} changed in {later} beyond how it runs")
    dirty = _git("status", "--porcelain", "--", *r.files)
    assert not dirty, f"uncommitted edits to the registration: {dirty}"


def _what_it_computes(text, name):
    """A registered file less what only decides how it runs: a code file's syntax tree
    without its top-level `if __name__ == "__main__" ...` blocks; any other file as it is."""
    if not name.endswith(".py"):
        return text
    tree = ast.parse(text)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.If) and "__name__" in ast.unparse(n.test))]
    return ast.dump(tree)


def test_only_how_a_file_runs_may_change_after_its_registration():
    code = "import x\nSEEDS = range(20)\n\n\ndef f():\n    return 1\n"
    runnable = code.replace("import x\n", 'import x\nif __name__ == "__main__":\n    __package__ = "p"\n')
    assert _what_it_computes(code, "a.py") == _what_it_computes(runnable, "a.py")
    assert _what_it_computes(code, "a.py") != _what_it_computes(code.replace("20", "19"), "a.py")
    assert _what_it_computes(code, "a.py") != _what_it_computes(code.replace("return 1", "return 2"), "a.py")
    assert _what_it_computes("20 seeds", "a.md") != _what_it_computes("19 seeds", "a.md")


def seen(reg, algo, h):
    """The seeds of one method at one H whose results were in view at registration."""
    by = reg.code.SEEN
    return by[algo].get(h, ()) if algo in by else by.get(h, ())


def _judged_runs(reg):
    """(H, algo, seed, started_at) of every committed prompt-matched terminal run of TPO and
    the other method that a registration judges."""
    out = []
    for h in reg.code.HORIZONS:
        for algo in ("tpo", reg.other):
            for summary in terminal_summaries(h, algo):
                if summary["seed"] not in reg.code.SEEDS:
                    continue
                starts = [a["started_at"] for a in summary.get("attempts_log", []) if a.get("started_at")]
                out.append((h, algo, int(summary["seed"]), min(starts, default=summary.get("started_at"))))
    return out


def _misdated(reg, runs, registered_at):
    """Runs that contradict the registration: a seed it does not list as seen that started
    before it, or one it lists as seen that started after it."""
    late = [(h, a, s) for h, a, s, t in runs if s not in seen(reg, a, h) and (t is None or t <= registered_at)]
    early = [(h, a, s) for h, a, s, t in runs if s in seen(reg, a, h) and t is not None and t > registered_at]
    return late, early


@BOTH
def test_every_run_it_judges_started_after_it_unless_listed_as_seen(reg):
    runs = _judged_runs(reg)
    assert runs, "no committed run of the registered cells"
    late, early = _misdated(reg, runs, rule_dates.timestamp(reg.registration.date))
    assert not late, f"runs started before the registration but not listed as seen: {late}"
    assert not early, f"listed as seen but started after the registration: {early}"


@BOTH
def test_the_date_check_catches_runs_on_the_wrong_side_of_the_registration(reg):
    at = rule_dates.timestamp(reg.registration.date)
    other = reg.other
    new_seed = max(seen(reg, other, 7)) + 1
    assert _misdated(reg, [(7, other, new_seed, at - 1)], at) == ([(7, other, new_seed)], [])
    assert _misdated(reg, [(7, other, 0, at + 1)], at) == ([], [(7, other, 0)])
    assert _misdated(reg, [(7, other, new_seed, at + 1), (7, "tpo", 0, at - 1)], at) == ([], [])


def test_the_ppo_registration_lists_what_was_in_view_per_method():
    """TPO's seeds 3-8 at H = 7 and 8 ran for the first registration before the second was
    made: listed as seen for TPO, not for PPO, whose seeds from 3 on are new."""
    at = rule_dates.timestamp(rule_dates.TERMINAL_PPO.date)
    reg = report.REGISTERED[1]
    runs = [(7, "tpo", 5, at - 1), (8, "tpo", 8, at - 1), (7, "ppo", 5, at + 1), (8, "ppo", 2, at - 1)]
    assert _misdated(reg, runs, at) == ([], [])
    assert _misdated(reg, [(7, "ppo", 5, at - 1)], at) == ([(7, "ppo", 5)], [])


def test_sign_flip_p_is_the_exact_share_of_sign_patterns():
    rng = np.random.default_rng(3)
    d = rng.normal(-0.5, 1, 9)
    patterns = np.array(list(itertools.product([1, -1], repeat=len(d))))
    brute = np.mean(patterns @ d <= d.sum() + 1e-12)
    assert R.p_lower(d) == pytest.approx(brute)
    assert R.p_lower(-d) == pytest.approx(np.mean(patterns @ -d <= -d.sum() + 1e-12))
    assert R.p_lower(np.zeros(5)) == 1.0  # all tied: nothing is shown


def test_signed_rank_p_is_wilcoxons_exact_tail():
    """Without ties, W+ (the positive ranks' sum) has the classical subset-sum null; the
    one-sided p that d is centred below 0 is P(W+ <= observed W+)."""
    d = np.array([-3.1, -0.2, 1.4, -2.2, -0.9, 0.3, -4.0, -1.7, 0.6, -2.9])
    n = len(d)
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for r in range(1, n + 1):  # number of subsets of {1..n} with each sum
        counts[r:] = counts[r:] + counts[:-r].copy()
    w_plus = sum(r for r, x in zip(sps_ranks(np.abs(d)), d) if x > 0)
    ref = counts[: int(w_plus) + 1].sum() / 2 ** n
    sr = R.signed_ranks(d)
    assert R.p_from(R.rank_distribution(sr), sr.sum()) == pytest.approx(ref)


def sps_ranks(a):
    return np.argsort(np.argsort(a)) + 1


def test_signed_ranks_drop_zeros_and_share_tied_ranks():
    assert R.signed_ranks([0.0, -1.0, 1.0, 2.0]).tolist() == [-1.5, 1.5, 3.0]
    # half ranks keep their halves in the null: sums of ±1.5 ±2 are ±0.5 and ±3.5
    assert R.p_from(R.rank_distribution(np.array([1.5, -2.0])), -0.5) == 0.5


def test_pooled_rank_p_is_the_convolution_of_the_per_h_nulls():
    rng = np.random.default_rng(5)
    diffs = [np.round(rng.normal(-0.3, 1, 6), 2) for _ in range(3)]
    srs = [R.signed_ranks(d) for d in diffs]
    patterns = [np.array(list(itertools.product([1, -1], repeat=len(s)))) @ np.abs(s) for s in srs]
    totals = sum(np.meshgrid(*patterns, indexing="ij")).ravel()
    observed = sum(s.sum() for s in srs)
    assert R.pooled_rank_p(diffs) == pytest.approx(np.mean(totals <= observed + 1e-9))


def test_pooled_p_flips_each_pair_and_weights_each_h_by_its_mean():
    # 2 H of 4 pairs: 2^8 patterns, few enough to list; the sampled p lands on the exact one
    diffs = [np.array([-3.0, -1.0, 0.5, -2.0, 0.7, 0.9]), np.array([-0.2, 0.1])]
    d = np.concatenate([x / len(x) for x in diffs])
    patterns = np.array(list(itertools.product([1, -1], repeat=len(d))))
    exact = np.mean(patterns @ d <= d.sum() + 1e-12)
    assert R.pooled_p(diffs, draws=200_000) == pytest.approx(exact, abs=0.004)


def test_holm_is_step_down_and_monotone():
    adj = R.holm({7: 0.01, 8: 0.04, 9: 0.03, 10: 0.5})
    assert adj == pytest.approx({7: 0.04, 9: 0.09, 8: 0.09, 10: 0.5})
    assert R.holm({7: 0.2, 8: 0.6})[8] == 0.6 and R.holm({7: 0.4, 8: 0.4})[7] == 0.8


def _finals(tpo_mean, grpo_mean, seeds=R.SEEDS, spread=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return ({s: float(tpo_mean + spread * rng.random()) for s in seeds},
            {s: float(grpo_mean + spread * rng.random()) for s in seeds})


@pytest.mark.slow  # three pooled tests of 200,000 sign patterns each
def test_outcome_words_for_each_result():
    lower = R.judge({h: _finals(1, 30, seed=h) for h in R.HORIZONS})
    assert lower.claim().startswith("supported") and lower.pooled_reading().startswith("TPO lower")
    mixed = {h: _finals(1, 30, seed=h) for h in R.HORIZONS}
    mixed[9] = _finals(30, 1, seed=9)
    worse = R.judge(mixed)
    assert worse.reading(9) == "GRPO lower" and worse.claim() == "contradicted: GRPO's error is lower at H = 9"
    tied = {h: _finals(5, 5, seed=h) for h in R.HORIZONS}
    tied[7] = _finals(1, 30, seed=7)
    unsure = R.judge(tied)
    assert unsure.claim().startswith("not settled: TPO lower at H = 7;")
    assert "not separated at H = 8, 9, 10" in unsure.claim()


def test_no_test_before_a_cell_has_every_seed():
    partial = {h: _finals(1, 30, seed=h) for h in R.HORIZONS}
    partial[8] = _finals(1, 30, seeds=R.SEEDS[:-1])
    o = R.judge(partial)
    assert 8 not in o.cells and o.reading(8) == f"{len(R.SEEDS) - 1} of {len(R.SEEDS)} seeds run: no test until {len(R.SEEDS)}"
    assert o.pooled is None and o.claim().startswith("not tested yet: 3 of 4")
    assert o.reading(7).startswith("complete")  # Holm waits for every H


@pytest.mark.slow  # 2,000 redraws, as the registration's command
def test_the_registrations_power_sentence_is_what_its_command_computes():
    seeds = report.load_paper_seeds()
    res = R.power(seeds["terminal-tpo-H10"], seeds["terminal-grpo-H10"])
    text = (REPO / REG.files[0]).read_text()
    assert f"about {round(100 * res['power_at_alpha_over_4'])} %" in text
    assert f"about {round(100 * res['null_at_alpha_over_4'])} %" in text
    assert res["power_at_alpha_over_4"] >= 0.9 and res["null_at_alpha"] <= R.ALPHA + 0.01


def test_the_report_prints_the_outcome_beside_the_registration():
    o = R.judge({10: _finals(1, 30)})
    text = "\n".join(report.registered_block(report.REGISTERED[0], o))
    assert REG.commit in text and REG.date[:10] in text
    assert o.claim() in text and "| 7 | 0 |" in text and "| 10 | 20 |" in text


@pytest.mark.slow  # pooled tests of 200,000 sign patterns
def test_the_ppo_analysis_calls_each_result_by_its_registered_words():
    lower = P.judge({h: _finals(1, 30, seed=h) for h in P.HORIZONS})
    assert lower.claim() == "supported: TPO's error is lower than PPO's at H = 7 and 8"
    assert lower.pooled_reading() == "TPO lower pooled over H = 7-8"
    worse = P.judge({7: _finals(1, 30, seed=7), 8: _finals(30, 1, seed=8)})
    assert worse.reading(8) == "PPO lower" and worse.claim() == "contradicted: PPO's error is lower at H = 8"
    unsure = P.judge({7: _finals(1, 30, seed=7), 8: _finals(5, 5, seed=8)})
    assert unsure.claim() == "not settled: TPO lower at H = 7; not separated at H = 8"
    partial = P.judge({7: _finals(1, 30, seed=7), 8: _finals(1, 30, seeds=P.SEEDS[:-1])})
    assert partial.claim() == "not tested yet: 1 of 2 H complete (complete: 7)"
    assert partial.reading(7).startswith("complete") and partial.pooled is None
    # its per-H test is the first analysis's, on the PPO pairs
    tpo, ppo = _finals(3, 4, spread=10, seed=1)
    c = P.cell(7, tpo, ppo)
    d = np.array([tpo[s] - ppo[s] for s in P.SEEDS])
    assert (c.p_tpo_lower, c.p_ppo_lower) == (R.p_lower(d), R.p_lower(-d))


def test_the_claim_over_both_analyses_follows_the_registered_rule():
    sup_g, sup_p = "supported: TPO's error is lower than GRPO's at every H = 7-10", \
        "supported: TPO's error is lower than PPO's at H = 7 and 8"
    assert P.combined(sup_g, sup_p).startswith("supported")
    assert P.combined(sup_g, "contradicted: PPO's error is lower at H = 7").startswith("contradicted")
    assert P.combined("contradicted: GRPO's error is lower at H = 9",
                      "not tested yet: 0 of 2 H complete (complete: none)").startswith("contradicted")
    assert P.combined(sup_g, "not tested yet: 1 of 2 H complete (complete: 7)").startswith("not tested yet")
    assert P.combined(sup_g, "not settled: not separated at H = 7, 8").startswith("not settled")
    both = P.combined("not settled: TPO lower at H = 10; not separated at H = 7, 8, 9", sup_p)
    assert "against GRPO not settled" in both and "against PPO supported" in both


def test_the_report_prints_both_outcomes_and_the_claim_over_them():
    g, p = R.judge({10: _finals(1, 30)}), P.judge({})
    text = "\n".join(report.registered_section([g, p]))
    for reg, o in zip(report.REGISTERED, (g, p)):
        assert reg.registration.commit in text and reg.registration.date[:10] in text
        assert o.claim() in text and reg.registration.files[0] in text
    assert "| 8 | 0 | TPO seeds 0–8, PPO seeds 0–2 |" in text
    assert P.combined(g.claim(), p.claim()) in text


def _split(k, seed=0):
    """TPO 10 points below GRPO on k of the 20 seeds and 10 above on the rest: the sign-flip
    p of "TPO lower" is P(Binomial(20, 1/2) >= k)."""
    low = set(np.random.default_rng(seed).choice(len(R.SEEDS), k, replace=False).tolist())
    return ({s: 45.0 if s in low else 55.0 for s in R.SEEDS}, {s: 50.0 for s in R.SEEDS})


def test_what_the_complete_h_fix_holds_whatever_the_other_h_show(monkeypatch):
    monkeypatch.setattr(R, "pooled_p", lambda diffs, *args, **kw: 1.0)  # the claim does not read it
    reg = report.REGISTERED[0]
    fills = [{h: _finals(a, b, seed=h) for h in (7, 8, 9)} for a, b in ((1, 30), (30, 1))]
    fills.append({h: _split(10, seed=h) for h in (7, 8, 9)})  # p 0.59 each way
    fills.append({7: _finals(1, 30, seed=7), 8: _finals(30, 1, seed=8), 9: _split(10)})

    def after(k):
        h10 = _split(k)
        outcomes = [R.judge({**fill, 10: h10}) for fill in fills]
        return report.fixed_text(reg, R.judge({10: h10})), {o.claim().split(":")[0] for o in outcomes}, outcomes

    text, claims, outcomes = after(13)  # p TPO lower 0.13, p GRPO lower 0.94: neither can pass Holm
    assert 'H = 10 reads "not separated"' in text and "(TPO lower 0.13, GRPO lower 0.94)" in text
    assert {o.reading(10) for o in outcomes} == {"not separated"}
    assert f"against GRPO, {report.OVER_BOTH}, {report.OUT_OF_REACH}" in text and report.ASSURED not in text
    assert "supported" not in claims and {"not settled", "contradicted"} <= claims
    text, claims, _ = after(4)  # p GRPO lower 0.0059 <= 0.05 / 4
    assert "at H = 10, TPO cannot read lower" in text and 'H = 10 reads "GRPO lower" (raw p 0.0059' in text
    assert f"against GRPO, {report.OVER_BOTH}, {report.ASSURED}" in text and report.OUT_OF_REACH not in text
    assert claims == {"contradicted"}
    text, claims, _ = after(15)  # p TPO lower 0.021: Holm's reading depends on the other H
    assert "TPO" not in text and "So against" not in text and {"supported", "not settled"} <= claims
    text, claims, outcomes = after(16)  # p TPO lower 0.0059 <= 0.05 / 4
    assert 'H = 10 reads "TPO lower"' in text and report.OUT_OF_REACH not in text
    assert {o.reading(10) for o in outcomes} == {"TPO lower"}
    assert report.fixed_text(reg, R.judge({})) == ""
    assert report.fixed_text(reg, outcomes[0]) == ""  # every H complete: Holm is printed instead
    ppo = report.fixed_text(report.REGISTERED[1], P.judge({7: _split(5)}))  # p PPO lower 0.021
    assert 'H = 7 reads "PPO lower" (raw p 0.021 ≤ α / 2 = 0.025)' in ppo and "against PPO, " in ppo
    assert ppo.endswith(f"{report.ASSURED}.") and {P.judge({7: _split(5), 8: _split(k)}).claim().split(":")[0]
                                                   for k in (20, 10, 0)} == {"contradicted"}


def test_a_p_beside_its_bound_keeps_its_side_of_it():
    above = 52429 / 2**20  # the smallest sign-flip p above 0.05
    assert float(report.p_beside(above, 0.05)) > 0.05 and report.pct(above) == "0.05"
    assert report.p_beside(0.9987, 0.05) == "0.999" and report.p_beside(0.0125, 0.0125) == "0.0125"
    assert report.p_beside(0.085, 0.05) == "0.085"


def test_the_readmes_claim_line_says_what_the_complete_h_fix():
    from tpo_bench.analysis.paper import pages

    def line(k):
        return pages.claim_line("\n".join(report.registered_section([R.judge({10: _split(k)}), P.judge({})])))
    assert (f". {report.FIXED} H = 10 (all 20 seeds): against GRPO, {report.OVER_BOTH}, {report.OUT_OF_REACH}"
            " ([the tests]") in line(13)
    assert f"against GRPO, {report.OVER_BOTH}, {report.ASSURED}" in line(4) and report.OUT_OF_REACH not in line(4)
    assert report.FIXED not in line(15)
