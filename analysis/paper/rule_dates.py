"""When each verdict rule took effect, and which verdicts it judged post hoc.

RULES lists every rule the report's verdicts depend on, with the commit it landed in, that
commit's date (git log -1 --format=%cI COMMIT; tests/test_rule_dates.py checks both where
the history is present) and the rows it governs. A verdict is post hoc for a rule that took
effect after any of its runs had started: the rule could have been chosen with those runs
in view. A run with no recorded start (runs of reproduction/results.parquet, which predate
its summary fields) counts as older than every rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass(frozen=True)
class Rule:
    commit: str
    date: str  # ISO 8601, the commit's date
    what: str
    scope: str  # "numbers", "claims", "claims over settings", "all", "steps", "known seeds",
    # or "section:<name>,..." or "algo:<name>,..."
    moved: int  # verdicts it moved on the committed data (analysis/paper/rule_log.py COMMIT)


RULES = (
    Rule("dc88b4d", "2026-11-30T10:11:38+00:00", "tabular claims read on the paper's log axes",
         "section:tabular_single,tabular_multi", 0),
    Rule("cb0c4bc", "2026-11-30T12:34:49+00:00", "seed subsets sampled without favouring low seeds",
         "steps", 0),
    Rule("d3b29ab", "2026-11-30T12:50:24+00:00", "appendix E borrows only prompt-matched DG runs",
         "section:dg_epochs", 0),
    Rule("a9ade17", "2026-11-30T14:03:11+00:00", "runs at a non-paper learning rate are not compared",
         "all", 0),
    Rule("9f76fc8", "2026-11-30T15:02:06+00:00", "tables hold DG's surprisal at its default",
         "algo:dg", 0),
    Rule("e51599a", "2026-11-30T19:01:47+00:00", "a steps row's spread is its statistic's bootstrap",
         "steps", 4),
    Rule("0ab6b9a", "2026-11-30T23:34:48+00:00", "with more seeds than the paper, steps at its seed count",
         "steps", 0),
    Rule("72d460d", "2026-12-01T08:37:01+00:00", "equivalence margins per family of numbers",
         "numbers", 0),
    Rule("9afe318", "2026-12-01T08:51:08+00:00", "equivalence verdicts, 5-seed minimum, claims fail early",
         "all", 76),
    Rule("02363b8", "2026-12-02T03:28:36+00:00", "LLM rows get a status, never a verdict",
         "section:llm_gsm8k,llm_graph_color", 0),
    Rule("abaca57", "2026-12-04T06:03:40+00:00", "reproduced needs equivalence; not distinguishable; "
         "margins widened to the paper's replicate noise where its seeds are known", "numbers", 18),
    Rule("8df8c18", "2026-12-04T18:56:35+00:00", "the summary counts MNIST's numbers on the "
         "validation-split rows, the test-file rows as their repeats", "section:mnist,mnist_holdout", 0),
    Rule("1303e4e", "2026-12-04T23:47:57+00:00", "a claim over settings of which some, too few to "
         "decide, have run is inconclusive (k of n settings run), not 'not run yet'",
         "claims over settings", 1),
    Rule("e023bed", "2026-12-06T02:27:23+00:00", "an ordering claim fails, as it holds, only on at "
         "least 5 seeds per item", "claims", 2),
    Rule("303c322", "2026-12-06T02:27:38+00:00", "no 'means of n of the paper's n seeds' note at the "
         "paper's seed count", "known seeds", 0),
    Rule("2341d3f", "2026-12-06T02:29:33+00:00", "a row the paper's own seeds cannot pass is beyond "
         "them, not judged", "known seeds", 1),
    Rule("7f9a9c3", "2026-12-07T12:47:30+00:00", "appendix E compares DG at one gate (the preset's "
         "current-policy gate) for both epoch counts", "section:dg_epochs", 0),
)


@dataclass(frozen=True)
class Registration:
    """An analysis registered before the runs it judges: the commit its files last changed
    in and that commit's date (tests/test_registered.py checks both, and that every run it
    judges, but those it lists as seen, started after that date). `runnable` lists later
    commits that changed only how a file runs, never what it computes: the test checks that
    every statement but those under `if __name__ == "__main__"` is the registered one."""
    name: str
    commit: str
    date: str
    files: tuple
    runnable: tuple = ()


TERMINAL_H_SWEEP = Registration(
    "terminal_h_sweep", "33a39c4", "2026-12-06T02:10:03+00:00",
    ("reproduction/registered/terminal_h_sweep.md", "analysis/paper/registered.py"))

TERMINAL_PPO = Registration(
    "terminal_ppo", "9cd26df", "2026-12-07T07:06:00+00:00",
    ("reproduction/registered/terminal_ppo.md", "analysis/paper/registered_ppo.py",
     "analysis/paper/registered.py"),  # its statistics are the first analysis's
    runnable=("a75e0ed",))  # runs by path too


def timestamp(iso: str) -> float:
    return datetime.fromisoformat(iso).astimezone(timezone.utc).timestamp()


def governs(rule: Rule, line: dict, section: str) -> bool:
    """Whether a report row (number_line / ordering_line) in section is judged by rule."""
    number = "algorithm" in line
    if rule.scope == "all":
        return True
    if rule.scope == "numbers":
        return number
    if rule.scope == "claims":
        return not number
    if rule.scope == "claims over settings":
        return not number and bool(line.get("_over"))
    if rule.scope == "steps":
        return number and line["metric"].startswith("steps_to_")
    if rule.scope == "known seeds":
        return number and bool(line.get("_known_seeds"))
    kind, _, names = rule.scope.partition(":")
    if kind == "section":
        return section in names.split(",")
    if kind == "algo":
        return number and line["algorithm"] in names.split(",")
    raise ValueError(f"unknown rule scope {rule.scope!r}")


def post_hoc(line: dict, section: str, started: list, rules=RULES) -> list[Rule]:
    """The rules governing a row that took effect after its earliest run started. started:
    the runs' start times (epoch seconds; None when not recorded, which counts as older
    than every rule). A row without runs has none."""
    if not started:
        return []
    first = min(float("-inf") if s is None else s for s in started)
    return [r for r in rules if governs(r, line, section) and timestamp(r.date) > first]


def flag(rules: list[Rule]) -> str:
    return ("post hoc: " + ", ".join(r.commit for r in rules)) if rules else ""


def table() -> list[dict]:
    """The rule log for the report: one row per rule, oldest first."""
    return [{"commit": r.commit, "took effect (UTC)": r.date[:16].replace("T", " "),
             "rule": r.what, "rows it judges": r.scope, "verdicts it moved": str(r.moved)}
            for r in sorted(RULES, key=lambda r: timestamp(r.date))]
