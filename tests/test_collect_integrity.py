"""collect.py and plot.py check a run instead of trusting `status: completed`:
tampered copies of real runs are skipped with their reason, a duplicate copy is
counted once, a damaged summary.json is named, and plot.py refuses a group that lacks
the config's last step instead of reporting an earlier one."""
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis import collect, plot
from conftest import REPO, TINY, run_dirs, run_here

TABULAR = ["task=tabular_multi", "task.episodes=5", "task.eval_every=2", "task.num_contexts=4",
           "threads=1", "log_every=1"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """Two demo seeds (one row per episode) and a tabular run that evaluates every 2 of
    5 steps (rows at steps 0, 2, 4, 5), made by the real runner (in here)."""
    root = tmp_path_factory.mktemp("pristine") / "outputs"
    for args in ([*TINY, "seed=0"], [*TINY, "seed=1"], TABULAR):
        assert run_here(root, *args)["status"] == "completed"
    return root


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    dst = tmp_path / "outputs"
    shutil.copytree(pristine, dst)
    return dst


def run(root, task="demo", seed=0) -> Path:
    [d] = [d for d in run_dirs(root) if d.parts[-4] == task and d.name == f"seed={seed}"
           and "backup" not in d.parts]
    return d


def metrics(d: Path) -> pd.DataFrame:
    return pd.read_parquet(d / "metrics.parquet")


def summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def edit_summary(d: Path, **changes) -> None:
    info = summary(d)
    for key, value in changes.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = value
    (d / "summary.json").write_text(json.dumps(info))


def main(root, tmp_path, *flags, capsys):
    out = tmp_path / "results.parquet"
    rc = collect.main([str(root), "--out", str(out), *flags])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err, (pd.read_parquet(out) if out.exists() else None)


@pytest.mark.slow
def test_consistent_runs_collect_with_their_commits(root, tmp_path, capsys):
    a, b = run(root, seed=0), run(root, seed=1)
    edit_summary(a, git_commits=None, git_commit="c0ffee0")  # a run from before git_commits
    edit_summary(b, git_commits=["aaaa111", "bbbb222"], git_commit="bbbb222")
    rc, text, df = main(root, tmp_path, capsys=capsys)
    assert rc == 0, text
    assert "collected 3 runs (10 rows), skipped 0" in text
    by_seed = df[df["task.name"] == "demo"].groupby("seed")
    assert by_seed["git_commit"].unique().to_dict() == {0: ["c0ffee0"], 1: ["bbbb222"]}
    assert by_seed["git_commits"].unique().to_dict() == {0: ["c0ffee0"], 1: ["aaaa111;bbbb222"]}
    tab = df[df["task.name"] == "tabular_multi"]
    assert tab["step"].tolist() == [0, 2, 4, 5]  # what the row-count rule must accept


@pytest.mark.slow
def test_partial_rows_in_a_completed_run_are_skipped(root, tmp_path, capsys):
    d = run(root, seed=0)
    df = metrics(d)
    df.loc[df.index[-1], "partial"] = True
    df.to_parquet(d / "metrics.parquet", index=False)
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 1 and out is None, text  # skipping is an error unless allowed
    assert "1 partial row" in text and "demo/tpo" in text and "seed=0" in text
    rc, text, out = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0
    assert sorted(out.loc[out["task.name"] == "demo", "seed"].unique()) == [1]
    assert "skipped 1" in text


@pytest.mark.slow
@pytest.mark.parametrize("tamper,reason", [
    ("drop_last", "2 rows, steps 0..1; the config expects 3 (task.episodes=3)"),
    ("drop_last_and_summary", "2 rows, steps 0..1; the config expects 3 (task.episodes=3)"),
    ("extra_row", "4 rows, steps 0..3; the config expects 3 (task.episodes=3)"),
    ("repeat_step", "steps 0, 1, 1"),
    ("summary_rows", "summary.json says 5 rows, metrics.parquet has 3"),
    ("tabular_drop", "the config expects 4 (task.episodes=5, task.eval_every=2"),
])
def test_row_count_must_match_the_config_and_the_summary(root, tmp_path, capsys, tamper, reason):
    d = run(root, "tabular_multi" if tamper.startswith("tabular") else "demo")
    df = metrics(d)
    if tamper in ("drop_last", "drop_last_and_summary", "tabular_drop"):
        df = df.iloc[:-1]
    elif tamper == "extra_row":
        df = pd.concat([df, df.iloc[[-1]].assign(step=3)], ignore_index=True)
    elif tamper == "repeat_step":
        df = df.assign(step=[0, 1, 1])
    df.to_parquet(d / "metrics.parquet", index=False)
    if tamper == "drop_last_and_summary":
        edit_summary(d, rows=2)  # a summary that agrees with a short table is still short
    if tamper == "summary_rows":
        edit_summary(d, rows=5)
    rc, text, _ = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0
    [line] = [ln for ln in text.splitlines() if str(d.relative_to(root)) in ln]
    assert "inconsistent" in line and reason in line, text
    assert "collected 2 runs" in text


@pytest.mark.slow
def test_mislabelled_run_is_skipped(root, tmp_path, capsys):
    """seed=1's directory holding seed 0's table (a checkpoint or a file copied across)."""
    shutil.copy(run(root, seed=0) / "metrics.parquet", run(root, seed=1) / "metrics.parquet")
    rc, text, out = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0
    assert "metrics.parquet says seed 0" in text and "seed=1" in text
    assert sorted(out.loc[out["task.name"] == "demo", "seed"].unique()) == [0]


@pytest.mark.slow
def test_duplicate_copy_is_reported_and_counted_once(root, tmp_path, capsys):
    original = run(root, seed=0)
    backup = root / "backup" / original.relative_to(root)
    shutil.copytree(original, backup)
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 1 and out is None
    [line] = [ln for ln in text.splitlines() if "duplicate of" in ln]
    assert line.split(": ", 1)[0].endswith(f"skipped {backup.relative_to(root)}")
    assert str(original.relative_to(root)) in line
    rc, text, out = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0
    counts = out[out["task.name"] == "demo"].groupby(["config_hash", "seed"]).size()
    assert counts.tolist() == [3, 3]


@pytest.mark.slow
@pytest.mark.parametrize("content,what", [
    ("", "empty"),
    ("{\"status\": \"compl", "invalid JSON"),
    ("[1, 2]", "not a JSON object"),
    ("\"completed\"", "not a JSON object"),
    ("{\"status\": \"running\", \"heartbeat\": \"soon\"}", "heartbeat"),
    ("{\"status\": \"completed\", \"rows\": \"three\"}", "rows"),
    ("{\"status\": [\"completed\"]}", "status"),
])
def test_damaged_summary_is_named_not_a_traceback(root, tmp_path, capsys, content, what):
    d = run(root, seed=0)
    (d / "summary.json").write_text(content)
    rc, text, out = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0
    [line] = [ln for ln in text.splitlines() if str(d.relative_to(root)) in ln]
    assert f"{d.relative_to(root)}/summary.json" in line and what in line, line
    assert sorted(out.loc[out["task.name"] == "demo", "seed"].unique()) == [1]


@pytest.mark.slow
def test_io_error_is_named(root, tmp_path, capsys):
    d = run(root, seed=0)
    edit_summary(d, status="failed", error_kind="io",
                 reason="OSError: [Errno 28] No space left on device")
    other = run(root, seed=1)
    edit_summary(other, status="failed", error_kind=None, reason="FloatingPointError: nan")
    rc, text, _ = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0
    assert "I/O error: OSError: [Errno 28] No space left on device" in text
    assert "failed: FloatingPointError: nan" in text


@pytest.mark.slow
def test_collect_cli_exit_status(root, tmp_path):
    """The script's exit status, not only main()'s return value."""
    (run(root, seed=0) / "summary.json").write_text("")
    proc = __import__("conftest").run_script("analysis/collect.py", str(root), "--out",
                                             str(tmp_path / "r.parquet"), check=False)
    assert proc.returncode == 1 and "--allow-skips" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.parquet").exists()


# ------------------------------------------------------------ plot.py: the last step

def frame(chash, seed, steps, episodes, eval_every=None, algo="tpo"):
    df = pd.DataFrame({"step": steps, "error": np.linspace(0.5, 0.3, len(steps)) + 0.01 * seed,
                       "config_hash": chash, "seed": seed, "task.name": "t", "algo.name": algo,
                       "task.episodes": episodes})
    if eval_every is not None:
        df["task.eval_every"] = eval_every
    return df


def test_plot_refuses_a_group_without_the_last_step(tmp_path, capsys):
    df = pd.concat([
        frame("A", 0, list(range(20)), 20), frame("A", 1, list(range(5)), 20),  # seed 1 cut at 4
        frame("B", 0, list(range(20)), 20, algo="grpo"), frame("B", 1, list(range(20)), 20, algo="grpo"),
        frame("C", 0, [0, 4, 8, 10], 10, eval_every=4, algo="dg"),  # evaluation rows: last is 10
    ], ignore_index=True)
    path = tmp_path / "r.parquet"
    df.to_parquet(path)
    rc = plot.main(["--results", str(path), "--out", str(tmp_path / "plots")])
    captured = capsys.readouterr()
    assert rc == 1
    assert "@4" not in captured.out and "tpo" not in captured.out.split("== t", 1)[1]
    assert "tpo" in captured.err and "seed 1" in captured.err and "step 19" in captured.err
    assert "@19" in captured.out and "@10" in captured.out
    with pytest.raises(ValueError, match="step 19"):
        plot.summarise(df)
    s = plot.summarise(df[df["config_hash"] != "A"]).set_index("config_hash")
    assert s.loc["C", "final_step"] == 10 and s.loc["B", "final_step"] == 19
    assert s.loc["B", "final_error_mean"] == pytest.approx(0.305)


@pytest.mark.slow  # takes seconds in process
def test_reproduction_results_still_summarise():
    results = REPO / "reproduction" / "results.parquet"
    if not results.is_file():
        pytest.skip("no reproduction/results.parquet in this checkout")
    df = pd.read_parquet(results, columns=collect.REQUIRED + ["task.episodes", "task.eval_every"])
    assert plot.incomplete_groups(df) == {}
    s = plot.summarise(df)
    last = df.groupby(collect.GROUP)["step"].max()
    assert (s.set_index(collect.GROUP)["final_step"] == last.reindex(s.set_index(collect.GROUP).index)).all()


@pytest.mark.slow
def test_merge_into_a_snapshot_replaces_a_run_once_and_keeps_its_float32(root, tmp_path):
    """--merge-into: the committed snapshot gains the new runs; a run it already holds is
    replaced by the new copy (never held twice); metrics it stores as float32 stay so."""
    first = collect.load_runs(collect.find_runs(root), root)[0]
    demo0 = first[(first["task.name"] == "demo") & (first["seed"] == 0)]
    stale = demo0.assign(error=np.float32(0.5)).astype({"error": np.float32})  # an older copy
    # a run only the snapshot has (as from another output root)
    others = first[first["task.name"] != "demo"].assign(config_hash="0000000000").astype({"error": np.float32})
    snapshot = tmp_path / "snapshot.parquet"
    pd.concat([stale, others], ignore_index=True).to_parquet(snapshot, index=False)
    p = __import__("conftest").run_script("analysis/collect.py", str(root), "--merge-into", str(snapshot))
    assert "replaced 1 run(s)" in p.stdout and "seed=0" in p.stdout
    merged = pd.read_parquet(snapshot)
    keys = merged.groupby(["config_hash", "seed"])["step"].count()
    assert len(keys) == 4 and ("0000000000", 0) in keys.index  # 3 collected, 1 kept
    assert keys.loc[("0000000000", 0)] == len(others)
    d0 = merged[(merged["task.name"] == "demo") & (merged["seed"] == 0)]
    assert len(d0) == len(demo0) and not (d0["error"] == 0.5).any()
    assert merged["error"].dtype == np.float32
    np.testing.assert_array_equal(d0["error"].to_numpy(), demo0["error"].to_numpy(np.float32))


@pytest.mark.slow
def test_merge_into_a_missing_or_unreadable_table_writes_nothing(root, tmp_path, capsys):
    """--merge-into names an existing results table: a missing one exits 2 before any run is
    read, a file that is no parquet exits 1; neither leaves a table or a lock behind."""
    before = set(tmp_path.iterdir())
    assert collect.main([str(root), "--merge-into", str(tmp_path / "none.parquet")]) == 2
    assert "--merge-into" in capsys.readouterr().err and set(tmp_path.iterdir()) == before
    junk = tmp_path / "junk.parquet"
    junk.write_text("not a table")
    assert collect.main([str(root), "--merge-into", str(junk)]) == 1
    err = capsys.readouterr().err
    assert "not a readable results table" in err and "nothing written" in err
    assert junk.read_text() == "not a table"
    other = tmp_path / "other.parquet"  # a parquet file, but not a results table
    pd.DataFrame({"step": [0, 1], "loss": [0.5, 0.25]}).to_parquet(other, index=False)
    kept = other.read_bytes()
    assert collect.main([str(root), "--merge-into", str(other)]) == 1
    err = capsys.readouterr().err
    assert "not a results table (no column task.name" in err and "nothing written" in err
    assert other.read_bytes() == kept
    assert {p.name for p in set(tmp_path.iterdir()) - before} <= {"junk.parquet", ".junk.parquet.lock",
                                                                 "other.parquet", ".other.parquet.lock"}


@pytest.mark.slow
def test_a_table_with_a_runs_rows_twice_is_refused_by_plot_and_by_merge(root, tmp_path, capsys):
    """Seed 0's rows repeated with error 0 would pull the line's mean down as if they were
    data: plot (every reader of the table) and collect --merge-into refuse the table,
    naming the repeated keys, and write nothing."""
    table = tmp_path / "results.parquet"
    assert collect.main([str(root), "--out", str(table)]) == 0
    df = pd.read_parquet(table)
    seed0 = df[(df["task.name"] == "demo") & (df["seed"] == 0)]
    pd.concat([df, seed0.assign(error=0.0)], ignore_index=True).to_parquet(table, index=False)
    before = table.read_bytes()
    capsys.readouterr()
    assert plot.main(["--results", str(table), "--out", str(tmp_path / "plots")]) == 1
    err = capsys.readouterr().err
    h = seed0["config_hash"].iloc[0]
    assert f"{len(seed0) * 2} rows repeat" in err and f"demo/tpo config {h} seed 0 step 0" in err
    assert not (tmp_path / "plots").exists() or not any((tmp_path / "plots").iterdir())
    assert collect.main([str(root), "--merge-into", str(table)]) == 1
    err = capsys.readouterr().err
    assert "rows repeat" in err and "nothing written" in err and table.read_bytes() == before
    # the same table without the repeat reads and merges
    df.to_parquet(table, index=False)
    assert collect.main([str(root), "--merge-into", str(table)]) == 0
    assert plot.main(["--results", str(table), "--out", str(tmp_path / "plots")]) == 0
