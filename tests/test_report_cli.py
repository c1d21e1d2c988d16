"""analysis/paper/report.py run as the README shows it, from a scratch working directory
its defaults write under outputs/, never over the committed
reproduction/REPRODUCTION.md, and an input with nothing to report on is refused before
anything is written."""
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic import results_table as build_results_table


@functools.lru_cache(maxsize=1)
def _built_table():
    return build_results_table()


def results_table():
    """synthetic.results_table(), built once for the module; each caller gets its own copy."""
    return _built_table().copy()


REPO = Path(__file__).resolve().parent.parent
COMMITTED = "# the committed report: must survive a default run byte for byte\n"


def report(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "analysis" / "paper" / "report.py"), *args],
                          cwd=cwd, text=True, capture_output=True, timeout=600)


def report_here(cwd: Path, monkeypatch, capsys, *args: str) -> subprocess.CompletedProcess:
    """`report.py ARGS` from cwd in process: the script's main, its exit code and output."""
    from tpo_bench.analysis.paper import report as script

    monkeypatch.chdir(cwd)
    code = script.main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["report.py", *args], code, out, err)


def listing(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "reproduction").mkdir()
    (tmp_path / "reproduction" / "REPRODUCTION.md").write_text(COMMITTED)
    return tmp_path


def assert_refused(proc, cwd: Path, before: dict, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr
    assert "Traceback" not in proc.stderr
    assert listing(cwd) == before  # no report, no figures folder, nothing touched


@pytest.mark.slow
def test_default_run_without_results_is_refused_and_writes_nothing(cwd):
    before = listing(cwd)
    proc = report(cwd)
    assert_refused(proc, cwd, before, "outputs/results.parquet", "not found",
                   "tpo-bench collect")  # the scratch folder is no checkout
    assert not (cwd / "outputs").exists()


# The other refusals in process (the script's main): the same exit codes and one-line
# errors, nothing written; the default run above goes through the script itself.


def test_a_table_without_rows_is_refused(cwd, monkeypatch, capsys):
    (cwd / "outputs").mkdir()
    results_table().iloc[:0].to_parquet(cwd / "outputs" / "results.parquet")
    before = listing(cwd)
    assert_refused(report_here(cwd, monkeypatch, capsys), cwd, before, "outputs/results.parquet", "no rows")


def test_a_table_no_paper_number_is_judged_on_is_refused(cwd, monkeypatch, capsys):
    # a demo task no paper section selects: every section would say "not run yet"
    demo = results_table().query("experiment == 'tabular_single'").assign(
        **{"experiment": "probe", "task.impl": "demo", "task.name": "demo"})
    (cwd / "outputs").mkdir()
    demo.to_parquet(cwd / "outputs" / "results.parquet")
    before = listing(cwd)
    assert_refused(report_here(cwd, monkeypatch, capsys), cwd, before, "matches any paper number",
                   "nothing written")


def test_an_unreadable_table_is_an_error_not_a_traceback(cwd, monkeypatch, capsys):
    (cwd / "outputs").mkdir()
    (cwd / "outputs" / "results.parquet").write_text("not parquet")
    before = listing(cwd)
    proc = report_here(cwd, monkeypatch, capsys)
    assert proc.returncode == 1 and "cannot read outputs/results.parquet" in proc.stderr
    assert "Traceback" not in proc.stderr and listing(cwd) == before


@pytest.mark.slow
def test_default_run_writes_under_outputs_and_leaves_the_committed_report(cwd):
    df = results_table()
    (cwd / "outputs").mkdir()
    df[df["experiment"] == "tabular_single"].to_parquet(cwd / "outputs" / "results.parquet")
    proc = report(cwd)
    assert proc.returncode == 0, proc.stderr
    assert (cwd / "reproduction" / "REPRODUCTION.md").read_bytes() == COMMITTED.encode()
    out = cwd / "outputs" / "REPRODUCTION.md"
    text = out.read_text()
    assert "## Summary" in text and "![tabular_single](figures/tabular_single.png)" in text
    assert (cwd / "outputs" / "figures" / "tabular_single.png").is_file()
    assert not (cwd / "figures").exists()  # the figures go beside the report, not into the cwd
    assert f"wrote {Path('outputs') / 'REPRODUCTION.md'}" in proc.stdout
    # what it is doing, on stderr, a line per step with the elapsed seconds
    steps = [line.split(" [")[0] for line in proc.stderr.splitlines() if line.startswith("report: ")]
    n_rows = (df["experiment"] == "tabular_single").sum()
    assert steps[0] == f"report: reading outputs/results.parquet ({n_rows:,} rows)"
    assert steps[1].startswith("report: verdicts: ")
    assert steps[2:] == ["report: drawing 1 figure into outputs/figures", "report: wrote outputs/REPRODUCTION.md"]
    assert all(line.endswith(" s]") for line in proc.stderr.splitlines() if line.startswith("report: "))
    quiet = report(cwd, "--quiet")
    assert quiet.returncode == 0 and "report:" not in quiet.stderr


@pytest.mark.slow
def test_the_committed_report_is_still_written_when_named(cwd):
    df = results_table()
    df[df["experiment"] == "tabular_single"].to_parquet(cwd / "reproduction" / "results.parquet")
    (cwd / "reproduction" / "findings.md").write_text("## Findings\n\nWritten by hand.\n")
    # reproduction/README.md's command: the figures and the findings beside the report
    proc = report(cwd, "--results", "reproduction/results.parquet", "--out",
                  "reproduction/REPRODUCTION.md", "--hardware", "test VM", "--quiet")
    assert proc.returncode == 0, proc.stderr
    text = (cwd / "reproduction" / "REPRODUCTION.md").read_text()
    assert "(figures/tabular_single.png)" in text and "test VM" in text
    assert (cwd / "reproduction" / "figures" / "tabular_single.png").is_file()
    assert "Written by hand." in text
    assert not (cwd / "outputs").exists() and not (cwd / "figures").exists()
    # a regeneration commits only what moved: the table is read, never rewritten, and the
    # same runs give the same report and figures byte for byte
    table = cwd / "reproduction" / "results.parquet"
    drawn = {p: p.read_bytes() for p in [table, *(cwd / "reproduction").rglob("*.*")] if p.is_file()}
    stamp = table.stat().st_mtime_ns
    again = report(cwd, "--results", "reproduction/results.parquet", "--out",
                   "reproduction/REPRODUCTION.md", "--hardware", "test VM", "--quiet")
    assert again.returncode == 0, again.stderr
    assert table.stat().st_mtime_ns == stamp
    changed = sorted(p.name for p, b in drawn.items() if p.read_bytes() != b)
    assert len(drawn) >= 4 and not changed, changed


@pytest.mark.slow  # takes seconds in process
def test_nothing_is_drawn_before_the_refusal(tmp_path):
    # runs a figure is drawn from, judged by no paper row: refused before the first figure
    from tpo_bench.analysis.paper import report

    df = results_table().query("experiment == 'mnist_stale'")
    paper = report.load_paper().query("experiment == 'tabular_single'")
    with pytest.raises(report.NothingToReport):
        report.build(df, tmp_path / "R.md", tmp_path / "figures", paper=paper)
    assert not (tmp_path / "figures").exists()
    # the same runs with their own paper row: a report, and the figure drawn
    text = report.build(df, tmp_path / "R.md", tmp_path / "figures",
                        paper=report.load_paper().query("experiment == 'mnist_stale'"))
    assert "![mnist_stale](figures/mnist_stale.png)" in text


@pytest.mark.slow
def test_runs_added_from_a_root_join_the_table_without_rewriting_it(cwd):
    import pandas as pd

    from tpo_bench.analysis import collect
    from dev.bench_collect import demo_config, write_run

    root = cwd / "runs"
    write_run(root, demo_config(), 0, [0.9, 0.5, 0.2])   # a run the table has: replaced, not counted twice
    run, _ = collect.collect(root)
    write_run(root, demo_config(), 1000, [0.8, 0.4, 0.1])  # a new seed: added
    df = pd.concat([results_table().query("experiment == 'tabular_single'"), run], ignore_index=True)
    table = cwd / "results.parquet"
    df.to_parquet(table)
    before = table.read_bytes()
    proc = report(cwd, "--results", "results.parquet", "--add-runs", "runs", "--out", "R.md")
    assert proc.returncode == 0, proc.stderr
    text = (cwd / "R.md").read_text()
    assert f"from `results.parquet` and the completed runs under `runs` ({len(df) + 3} rows)" in text  # the new seed's 3
    assert "added 2 completed run(s) from runs (1 replacing the table's copy" in proc.stderr
    assert table.read_bytes() == before
    missing = report(cwd, "--results", "results.parquet", "--add-runs", "nope", "--out", "R2.md")
    assert missing.returncode == 2 and "--add-runs nope: no such folder" in missing.stderr
    assert not (cwd / "R2.md").exists()
