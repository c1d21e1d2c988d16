"""collect, plot and migrate over damaged, partial, mixed-code, symlinked and stale run
trees, with run directories made by hand (scripts/bench_collect.py's `write_run`, shaped
like the runner's): no training, each test well under a second."""
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import collect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_collect import demo_config, write_run  # noqa: E402


def runs(root, seeds=(0, 1), lr=1e-3, episodes=3, **summary):
    """Completed demo/tpo runs of one config, one per seed; their directories."""
    config = demo_config(episodes, lr)
    return [write_run(root, config, s, np.linspace(0.9, 0.1 + 0.01 * s, episodes), **summary)
            for s in seeds]


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
    from contract import schema

    root, scratch = tmp_path / "outputs", tmp_path / "scratch"
    d0, d1 = runs(scratch, seeds=(0, 1))
    runs(root, seeds=(0,), lr=2e-3)  # a run of the tree's own
    (root / "demo").rename(root / "own")
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
