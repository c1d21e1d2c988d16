"""The rule log: each rule's recorded commit and date, and the post-hoc flag on verdicts
whose rule took effect after their runs had started."""
import json
import subprocess

import pandas as pd
import pytest

from tpo_bench.analysis.paper import pages, rule_dates
from tpo_bench.analysis.paper import verdicts as V

from conftest import REPO


def _git_date(commit):
    got = subprocess.run(["git", "log", "-1", "--format=%cI", commit], cwd=REPO,
                         capture_output=True, text=True)
    return got.stdout.strip() if got.returncode == 0 else None


@pytest.mark.slow  # reads git log
@pytest.mark.parametrize("rule", rule_dates.RULES, ids=lambda r: r.commit)
def test_each_rule_took_effect_at_its_commits_date(rule):
    date = _git_date(rule.commit)
    if date is None:
        pytest.skip("no git history here")
    assert rule.date == date


def test_a_rule_after_a_rows_first_run_marks_it_post_hoc():
    rule = rule_dates.Rule("abc1234", "2026-12-01T08:00:00+00:00", "a rule", "numbers", 0)
    row = {"algorithm": "tpo", "metric": "final_error_pct"}
    before, after = rule_dates.timestamp(rule.date) - 60, rule_dates.timestamp(rule.date) + 60
    assert rule_dates.post_hoc(row, "mnist", [before, after], (rule,)) == [rule]
    assert rule_dates.post_hoc(row, "mnist", [after], (rule,)) == []
    assert rule_dates.post_hoc(row, "mnist", [None], (rule,)) == [rule]  # start not recorded
    assert rule_dates.post_hoc(row, "mnist", [], (rule,)) == []  # no runs, no verdict
    claim = {"claim": "tpo < dg", "metric": "final_error_pct"}
    assert rule_dates.post_hoc(claim, "mnist", [before], (rule,)) == []  # numbers only
    assert rule_dates.flag([rule]) == "post hoc: abc1234"


def test_scopes_pick_their_rows():
    steps = {"algorithm": "dg", "metric": "steps_to_1pct"}
    final = {"algorithm": "tpo", "metric": "final_error_pct", "_known_seeds": True}
    rule = lambda scope: rule_dates.Rule("x", "2026-01-01T00:00:00+00:00", "", scope, 0)  # noqa: E731
    assert rule_dates.governs(rule("steps"), steps, "vocab_sweep")
    assert not rule_dates.governs(rule("steps"), final, "vocab_sweep")
    assert rule_dates.governs(rule("known seeds"), final, "terminal_h_sweep")
    assert not rule_dates.governs(rule("known seeds"), steps, "terminal_h_sweep")
    over, once = {"claim": "a > b", "_over": True}, {"claim": "a > b", "_over": False}
    assert rule_dates.governs(rule("claims over settings"), over, "dg_epochs")
    assert not rule_dates.governs(rule("claims over settings"), once, "dg_epochs")
    assert not rule_dates.governs(rule("claims over settings"), final, "dg_epochs")
    assert rule_dates.governs(rule("algo:dg"), steps, "x") and not rule_dates.governs(rule("algo:dg"), final, "x")
    assert rule_dates.governs(rule("section:a,b"), final, "b") and not rule_dates.governs(rule("section:a"), final, "b")


def test_the_committed_report_flags_its_post_hoc_verdicts():
    report = (REPO / "reproduction" / "REPRODUCTION.md").read_text()
    assert "### Rule log" in report
    for r in rule_dates.RULES:
        assert f"| {r.commit} |" in report, r.commit
    rows = pages.section_tables(report, "terminal_h_sweep")[0]
    ran = [r for r in rows if not r["verdict"].startswith((V.NOT_RUN, V.NEEDS_GPU))]
    # the newest rule judging every row here; a method at an H whose runs all started after
    # it (the study queue's, none in the committed table) is judged by rules fixed before
    # its data; every other row's runs predate it
    newest = max((r for r in rule_dates.RULES
                  if all(rule_dates.governs(r, row, "terminal_h_sweep") for row in ran)),
                 key=lambda r: rule_dates.timestamp(r.date))
    # a configuration: (task, method, matching)
    table = pd.read_parquet(REPO / "reproduction" / "results.parquet",
                            columns=["task.name", "algo.name", "match"])
    in_table = set(map(tuple, table.drop_duplicates().to_numpy()))
    starts = {}
    for summary in (REPO / "reproduction" / "runs" / "terminal").glob("reverse_h*/*/*/seed=*/summary.json"):
        match = json.loads((summary.parent / "config.json").read_text())["match"]
        key = (summary.parts[-5], summary.parts[-4], match)
        starts.setdefault(key, []).append(json.loads(summary.read_text())["started_at"])
    after = {k for k, s in starts.items() if min(s) > rule_dates.timestamp(newest.date) and k not in in_table}

    def config(row):  # a grouped method's interaction-matched row reads its prompt-matched runs
        h, match = row["setting"].split(",")[0].removeprefix("H="), row["setting"].split("match=")[1]
        key = (f"reverse_h{h}", row["algorithm"], match.split(",")[0].strip())
        return key if key in starts else (*key[:2], "prompts")
    fresh = [r for r in ran if config(r) in after]
    old = [r for r in ran if r not in fresh]
    assert fresh and old and all(r["rules set after its runs"].startswith("post hoc: ") for r in old)
    assert all(newest.commit in r["rules set after its runs"] for r in old)
    assert all(r["rules set after its runs"] == "" for r in fresh)


def test_the_committed_report_flags_a_settings_claim_rule_on_settings_claims_only():
    """A rule scoped to claims over settings marks those claims post hoc where their runs
    predate it, and no claim on one setting."""
    rule = next(r for r in rule_dates.RULES if r.scope == "claims over settings")
    report = (REPO / "reproduction" / "REPRODUCTION.md").read_text()
    claims = [r for t in pages.tables(report) for r in t if "claim" in r and r.get("ours")]
    over = [r for r in claims if r["verdict"].startswith(V.INCONCLUSIVE) and "settings run)" in r["verdict"]]
    assert over and all(rule.commit in r["rules set after its runs"] for r in over)
    once = [r for r in claims if not r["ours"].startswith("holds in ")]  # over settings: "holds in k of n"
    assert once and not any(rule.commit in r["rules set after its runs"] for r in once)
