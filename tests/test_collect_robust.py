"""collect, plot and migrate over damaged, partial, mixed-code, symlinked and stale run
trees, with run directories made by hand (dev/bench_collect.py's `write_run`, shaped
like the runner's): no training, each test well under a second."""
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpo_bench.analysis import collect
from dev.bench_collect import demo_config, write_run
from conftest import as_legacy

REPO = Path(__file__).resolve().parents[1]


def runs(root, seeds=(0, 1), lr=1e-3, episodes=3, **summary):
    """Completed demo/tpo runs of one config, one per seed; their directories."""
    config = demo_config(episodes, lr)
    return [write_run(root, config, s, np.linspace(0.9, 0.1 + 0.01 * s, episodes), **summary)
            for s in seeds]


def demo_hash(lr=1e-3, episodes=3):
    from tpo_bench.contract.identity import config_hash

    return config_hash(demo_config(episodes, lr))


def main(root, tmp_path, *flags, capsys):
    out = tmp_path / "results.parquet"
    rc = collect.main([str(root), "--out", str(out), *flags])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err, (pd.read_parquet(out) if out.exists() else None)


# ------------------------------------------------------------ identity columns

@pytest.mark.parametrize("drop", [["seed", "config_hash"], ["seed"], ["config_hash"],
                                  ["task.name"], ["algo.name"]])
def test_a_table_without_its_identity_columns_is_inconsistent(tmp_path, capsys, drop):
    root = tmp_path / "outputs"
    _, d = runs(root)
    df = pd.read_parquet(d / "metrics.parquet").drop(columns=drop)
    df.to_parquet(d / "metrics.parquet", index=False)
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 1 and out is None, text
    [line] = [ln for ln in text.splitlines() if "seed=1" in ln]
    assert "inconsistent" in line and f"lacks {', '.join(sorted(drop))}" in line, line
    rc, text, out = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0 and out["seed"].tolist() == [0, 0, 0]


# ------------------------------------------------------------ what blocks and what does not

def test_failed_interrupted_and_running_runs_are_left_out_not_blocking(tmp_path, capsys):
    root = tmp_path / "outputs"
    runs(root, seeds=(0, 1))
    config = demo_config()
    write_run(root, config, 2, [0.9] * 3, status="failed", reason="FloatingPointError: loss is nan")
    write_run(root, config, 3, [0.9] * 3, status="running", heartbeat=time.time())
    write_run(root, config, 4, [0.9] * 3, status="interrupted", reason="SIGTERM")
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 0, text
    assert sorted(out["seed"].unique()) == [0, 1]
    assert "failed: FloatingPointError: loss is nan" in text and "seed=3" in text and "seed=4" in text
    assert "collected 2 runs (6 rows), skipped 3" in text
    assert "left out 3 run(s) not completed (1 failed, 2 unfinished" in text


@pytest.mark.parametrize("damage", ["no_metrics", "garbage_metrics", "partial_row"])
def test_a_completed_run_whose_files_disagree_still_blocks(tmp_path, capsys, damage):
    root = tmp_path / "outputs"
    _, d = runs(root)
    write_run(root, demo_config(), 2, [0.9] * 3, status="failed", reason="oom")
    metrics = d / "metrics.parquet"
    if damage == "no_metrics":
        metrics.unlink()
    elif damage == "garbage_metrics":
        metrics.write_bytes(b"not parquet" * 10)
    else:
        df = pd.read_parquet(metrics)
        df.loc[df.index[-1], "partial"] = True
        df.to_parquet(metrics, index=False)
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 1 and out is None, text
    assert "--allow-skips" in text and "seed=1" in text
    if damage == "no_metrics":
        assert "says completed" in text and "force=true" in text
    rc, text, out = main(root, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0 and out["seed"].unique().tolist() == [0]


# ------------------------------------------------------------ symlinked folders

def test_collect_and_the_run_finder_follow_the_same_symlinked_folders(tmp_path, capsys):
    """output_root/demo a link to scratch (the sweep writes through it), a link back up
    the tree (a loop) and a second link to the same scratch: every run once."""
    from tpo_bench.contract import schema

    root, scratch = tmp_path / "outputs", tmp_path / "scratch"
    d0, d1 = runs(scratch, seeds=(0, 1))
    runs(root / "own", seeds=(0,), lr=2e-3)  # a run of the tree's own
    (root / "demo").symlink_to(scratch / "demo", target_is_directory=True)
    (scratch / "demo" / "loop").symlink_to(root, target_is_directory=True)
    (root / "again").symlink_to(scratch, target_is_directory=True)
    h = d0.parent.name
    assert schema.find_run(root, h, 1) == root / "demo" / "tpo" / h / "seed=1"
    found = [p.relative_to(root).as_posix() for p in schema.run_dirs(root)]
    assert sorted(found) == found and len(found) == 3, found
    assert f"demo/tpo/{h}/seed=0" in found and f"demo/tpo/{h}/seed=1" in found
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 0, text
    assert "collected 3 runs (9 rows), skipped 0" in text
    assert out.groupby(["config_hash", "seed"]).ngroups == 3


# ------------------------------------------------------------ code fingerprints

OLD, NEW = "a1" * 16, "b2" * 16


def mixed_tree(root):
    """Seeds 0 and 1 under one code, seed 2 under another, seed 3 recorded without one."""
    runs(root, seeds=(0, 1), code_fingerprint=OLD)
    runs(root, seeds=(2,), code_fingerprint=NEW)
    runs(root, seeds=(3,))
    runs(root, seeds=(0,), lr=2e-3, code_fingerprint=NEW)  # another config: not mixed


def test_a_run_without_a_code_fingerprint_conflicts_with_none(tmp_path, capsys):
    root = tmp_path / "outputs"
    runs(root, seeds=(0, 1), code_fingerprint=OLD)
    runs(root, seeds=(2,))
    runs(root, seeds=(3,), code_fingerprint="")  # recorded, but empty: unknown too
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 0, text
    fps = out.groupby("seed")["code_fingerprint"].first()
    assert fps.loc[0] == OLD and fps.loc[1] == OLD and pd.isna(fps.loc[2]) and pd.isna(fps.loc[3])


def test_collect_refuses_a_line_pooling_two_code_versions(tmp_path, capsys):
    root = tmp_path / "outputs"
    mixed_tree(root)
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 1 and out is None, text
    [line] = [ln for ln in text.splitlines() if "code versions" in ln]
    h = demo_hash()
    assert line.startswith(f"error: tpo on demo (config {h})"), line
    assert f"{OLD[:12]}: seeds 0, 1" in line and f"{NEW[:12]}: seed 2" in line, line
    assert "--split-code" in line and "2 code versions" in line


def test_split_code_draws_each_code_version_as_its_own_line(tmp_path, capsys):
    from tpo_bench.analysis import plot

    root = tmp_path / "outputs"
    mixed_tree(root)
    rc, text, out = main(root, tmp_path, "--split-code", capsys=capsys)
    assert rc == 0, text
    lines = out.groupby(collect.GROUP)["seed"].unique().map(sorted)
    h, other = (out.loc[out["optim.lr"] == lr, "config_hash"].iloc[0] for lr in (1e-3, 2e-3))
    assert {(algo, c): seeds for (_, algo, c), seeds in lines.items()} == {
        (f"tpo [code {OLD[:8]}]", h): [0, 1], (f"tpo [code {NEW[:8]}]", h): [2],
        ("tpo", h): [3], ("tpo", other): [0]}, lines
    # plot refuses the unsplit table the same way, and splits it when asked
    table = tmp_path / "mixed.parquet"
    mixed = pd.concat([out.drop(columns="algo.name"), out["algo.name"].str.replace(r" \[code .*\]", "", regex=True)],
                      axis=1)
    mixed.to_parquet(table)
    assert plot.main(["--results", str(table), "--out", str(tmp_path / "plots")]) == 1
    err = capsys.readouterr().err
    assert "2 code versions" in err and OLD[:12] in err and NEW[:12] in err
    assert not (tmp_path / "plots").exists()
    assert plot.main(["--results", str(table), "--out", str(tmp_path / "plots"), "--split-code"]) == 0
    assert (tmp_path / "plots" / "demo.png").is_file()


def test_prior_attempts_name_a_damaged_one_and_leave_out_one_without_code(tmp_path, capsys):
    """--prior-attempts: a kept result whose summary.json is damaged blocks collect as any
    damaged run does, named by its folder; one recording no code fingerprint (its code
    unknown, so it could pool with today's) is left out."""
    import shutil

    root = tmp_path / "outputs"
    damaged, unknown = runs(root, seeds=(0, 1), code_fingerprint=NEW)
    (damaged / "prior-attempt-1").mkdir()
    (damaged / "prior-attempt-1" / "summary.json").write_text("{")
    (unknown / "prior-attempt-1").mkdir()
    shutil.copy(unknown / "metrics.parquet", unknown / "prior-attempt-1")
    info = json.loads((unknown / "summary.json").read_text())
    (unknown / "prior-attempt-1" / "summary.json").write_text(json.dumps({**info, "code_fingerprint": None}))
    rc, text, out = main(root, tmp_path, "--prior-attempts", capsys=capsys)
    assert rc == 1 and out is None, text
    assert "skipped demo/tpo/" in text and "seed=0/prior-attempt-1: damaged prior-attempt-1/summary.json" in text
    rc, text, out = main(root, tmp_path, "--prior-attempts", "--allow-skips", capsys=capsys)
    assert rc == 0, text
    assert out.groupby("seed").size().to_dict() == {0: 3, 1: 3} and set(out["algo.name"]) == {"tpo"}


def test_a_code_fingerprint_is_provenance_not_a_legend_key(tmp_path, capsys):
    from tpo_bench.analysis.labels import legend_labels

    root = tmp_path / "outputs"
    runs(root, seeds=(0,), code_fingerprint=OLD)
    runs(root, seeds=(0,), lr=2e-3, code_fingerprint=NEW)
    rc, text, out = main(root, tmp_path, capsys=capsys)
    assert rc == 0, text
    labels = sorted(legend_labels(out).values())
    assert labels == ["tpo (optim.lr=0.001, lr_effective=0.001, n=1)",
                      "tpo (optim.lr=0.002, lr_effective=0.002, n=1)"], labels


# ------------------------------------------------------------ a full disk under --out

def enospc(*args, **kwargs):
    raise OSError(28, "No space left on device")


def write_half(target, data: bytes) -> None:
    """Part of a file into a path or an open file, as a writer does before the disk fills."""
    if hasattr(target, "write"):
        target.write(data)
    else:
        Path(target).write_bytes(data)


def test_a_full_disk_under_collect_out_is_one_line(tmp_path, capsys, monkeypatch):
    root = tmp_path / "outputs"
    runs(root)

    def half_then_full(self, path, *args, **kwargs):
        write_half(path, b"PAR1 half a table")
        enospc()

    monkeypatch.setattr(pd.DataFrame, "to_parquet", half_then_full)
    out = tmp_path / "tables" / "results.parquet"
    rc = collect.main([str(root), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith(f"error: cannot write {out}") and "No space left on device" in line, line
    assert list(out.parent.iterdir()) == []  # no table, no temp file


def test_a_full_disk_under_plot_out_is_one_line(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    from tpo_bench.analysis import plot

    root = tmp_path / "outputs"
    runs(root)
    table = tmp_path / "results.parquet"
    assert collect.main([str(root), "--out", str(table)]) == 0

    def half_then_full(self, fname, *args, **kwargs):
        write_half(fname, b"\x89PNG half a figure")
        enospc()

    monkeypatch.setattr(Figure, "savefig", half_then_full)
    capsys.readouterr()
    rc = plot.main(["--results", str(table), "--out", str(tmp_path / "plots")])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith("error: OSError:") and "No space left on device" in line, line
    assert [p for p in (tmp_path / "plots").rglob("*") if p.is_file()] == []


# ------------------------------------------------------------ a stale table

@pytest.mark.slow  # takes seconds in process
def test_plot_warns_when_runs_finished_after_its_table(tmp_path, capsys):
    """The stale-table fault: a sweep adds a run after the last collect; plot alone would
    draw the old table."""
    import os

    from tpo_bench.analysis import plot

    root = tmp_path / "outputs"
    runs(root, seeds=(0, 1))
    table = root / "results.parquet"
    assert collect.main([str(root), "--out", str(table)]) == 0
    made = table.stat().st_mtime
    plots = ["--results", str(table), "--out", str(tmp_path / "plots")]

    def stderr_of_plot():
        capsys.readouterr()
        assert plot.main(plots) == 0
        return capsys.readouterr().err

    assert "warning" not in stderr_of_plot()
    late = runs(root, seeds=(2,), finished_at=made + 60)[0]
    early = runs(root, seeds=(3,), finished_at=made - 60)[0]  # an older run copied in: not in it either
    failed = write_run(root, demo_config(), 4, [0.9] * 3, status="failed", finished_at=made + 60)
    for d in (late, early, failed):
        os.utime(d / "summary.json", (made + 30, made + 30))
    [line] = [ln for ln in stderr_of_plot().splitlines() if "warning" in ln]
    assert line.startswith(f"warning: 2 completed runs under {root} finished after {table}"), line
    assert line.endswith(f"python analysis/collect.py {root} --out {table}")
    plots += ["--add-runs", str(root)]  # drawn from their folder: none left out, no warning
    assert "warning" not in stderr_of_plot()
    plots = plots[:-2]
    assert collect.main([str(root), "--out", str(table)]) == 0  # re-collected: quiet again
    os.utime(table, (made + 90, made + 90))  # (as written after the late run's finish)
    assert "warning" not in stderr_of_plot()


# ------------------------------------------------------------ migrate over damaged runs

def legacy_run(root, seed):
    """A run recorded under the hash with the preset names in (tools.migrate re-keys it)."""
    return as_legacy(write_run(root, demo_config(), seed, [0.9, 0.5, 0.2]))


def test_a_legacy_copy_beside_its_current_run_is_counted_once(tmp_path):
    """A run's table recorded under its legacy hash is re-keyed before copies are told
    apart: beside the same run under today's hash it is a duplicate, not a second seed."""
    root = tmp_path / "outputs"
    old = legacy_run(root, 0)
    write_run(root, demo_config(), 0, [0.9, 0.5, 0.2])
    df, skipped = collect.collect(root)
    assert len(df) == 3 and set(df["config_hash"]) == {demo_hash()}
    assert [(r.status, r.path) for r in skipped] == [("duplicate", old)]


def test_migrate_names_and_skips_damaged_runs_and_moves_the_rest(tmp_path, capsys):
    import datetime

    import torch

    from tpo_bench.tools import migrate

    root = tmp_path / "outputs"
    runs = {seed: legacy_run(root, seed) for seed in range(5)}
    torch.save({"version": 1, "when": datetime.date(2020, 1, 1)}, runs[0] / "checkpoint.pt")
    (runs[1] / "checkpoint.pt").write_bytes(b"\x80garbage, not a checkpoint" * 4)
    (runs[2] / "summary.json").write_text("")
    (runs[3] / "config.json").write_text("[1, 2]")
    before = {s: (d / "metrics.parquet").read_bytes() for s, d in runs.items()}
    for args in (["--dry-run"], []):
        capsys.readouterr()
        assert migrate.main([str(root), *args]) == 1
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and "weights_only" not in captured.err
    left = [ln for ln in captured.err.splitlines() if ln.startswith("[left]")]
    assert len(left) == 4, captured.err
    for seed, what in ((0, "checkpoint.pt"), (1, "checkpoint.pt"), (2, "summary.json"),
                       (3, "config.json")):
        [line] = [ln for ln in left if f"seed={seed}:" in ln]
        assert what in line, line
        assert (runs[seed] / "metrics.parquet").read_bytes() == before[seed]  # untouched
    assert not runs[4].exists()
    assert (root / "demo" / "tpo" / demo_hash() / "seed=4" / "metrics.parquet").is_file()
    assert "moved 1, already current 0, left 4" in captured.out


# ------------------------------------------------------------ the table, cell for cell

EXPECTED = REPO / "tests" / "fixtures" / "collect_expected.parquet"


def equivalence_tree(root):
    """Runs of two configs, one recorded under its legacy hash, one with a column the
    others lack and NaN metrics, provenance of both kinds, and a backup copy."""
    import shutil

    a = runs(root, seeds=(0, 1), code_fingerprint=OLD)
    runs(root, seeds=(0, 2), lr=2e-3, git_commits=None)
    legacy_run(root, 5)
    [odd] = runs(root, seeds=(3,), episodes=4)
    df = pd.read_parquet(odd / "metrics.parquet")
    df.assign(gate_mean=[0.5, np.nan, 0.25, 0.125], loss=np.nan).to_parquet(odd / "metrics.parquet", index=False)
    shutil.copytree(a[0], root / "backup" / a[0].relative_to(root))


@pytest.mark.parametrize("block_runs", [256, 2])
def test_collect_gives_the_table_it_always_gave(tmp_path, monkeypatch, block_runs):
    """collect's table of a handful of runs equals the one the per-run reader (the
    parent of the batched reader) wrote: tests/fixtures/collect_expected.parquet."""
    monkeypatch.setattr(collect, "BLOCK_RUNS", block_runs)  # also across conversion blocks
    root = tmp_path / "outputs"
    equivalence_tree(root)
    df, skipped = collect.collect(root)
    assert [r.status for r in skipped] == ["duplicate"]
    assert df["code_fingerprint"].tolist() == [OLD] * 6 + [None] * 13
    expected = pd.read_parquet(EXPECTED)
    pd.testing.assert_frame_equal(df.drop(columns="code_fingerprint"), expected, check_exact=True)


def test_runs_under_way_are_read_for_figures_and_never_collected(tmp_path):
    root = tmp_path / "outputs"
    runs(root, seeds=(0,))
    config = demo_config(episodes=5)
    write_run(root, config, 1, [0.9, 0.8], status="running", heartbeat=time.time())
    write_run(root, config, 2, [0.9, 0.8, 0.7], status="interrupted", reason="SIGTERM")
    write_run(root, config, 3, [0.9, 0.8], status="running", heartbeat=0.0)  # silent: its process is gone
    write_run(root, config, 4, [0.9], status="failed", reason="FloatingPointError: loss is nan")
    copied = write_run(root, config, 5, [0.9, 0.8], status="interrupted")  # another run's table
    df = pd.read_parquet(copied / "metrics.parquet").assign(seed=6)
    df.to_parquet(copied / "metrics.parquet", index=False)
    got = collect.in_progress(root)
    assert got.groupby("seed")["step"].max().to_dict() == {1: 1, 2: 2, 3: 1}
    assert got.groupby("seed")[collect.PROGRESS].first().to_dict() == {1: "running", 2: "interrupted",
                                                                        3: "interrupted"}
    assert got["partial"].eq(True).all() and collect.completed(got).empty
    table, _ = collect.collect(root)
    assert set(table["seed"]) == {0}  # a result only when completed
    assert collect.in_progress(tmp_path / "none").empty
