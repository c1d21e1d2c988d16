"""The hash is of the science, not the preset names, and runs recorded
under the hash from before (names included) are still found: directories through
`python -m tools.migrate`, tables re-keyed as they are read."""
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tpo_bench.analysis import rekey
from tpo_bench.bench.build import ConfigError, build
from tpo_bench.contract import schema
from tpo_bench.contract.identity import config_hash, legacy_hash
from tpo_bench.tools import migrate
from conftest import REPO, as_legacy, compose, metrics, run_bench, run_dirs, run_here, summary, wait_for
from integrity_runs import start

# Runs written by code that hashed the preset names: a completed tabular_single TPO
# run, and a GRPO run stopped by SIGTERM at a checkpoint.
LEGACY = REPO / "tests" / "fixtures" / "legacy_runs"
COMPLETED = ["task=tabular_single", "algo=tpo", "seed=0", "task.episodes=30", "threads=1"]
INTERRUPTED = ["task=tabular_single", "algo=grpo", "seed=3", "task.episodes=200",
               "checkpoint_every=4", "threads=1"]


def _spec(*overrides, root):
    return build(compose(*overrides, f"output_root={root}"))


@pytest.mark.parametrize("a,b", [
    (["task=reversal_v2"], ["task=seq", "task.reward=bag_of_tokens", "task.episodes=1000"]),
    (["algo=grpo_no_kl"], ["algo=grpo", "algo.kl_coef=0"]),
])
def test_two_names_for_one_science_get_one_hash(a, b, tmp_path):
    one, other = _spec(*a, root=tmp_path), _spec(*b, root=tmp_path)
    assert one.config_hash == other.config_hash
    # the names stay, as labels in the record
    assert (one.config["task"]["name"], one.config["algo"]["name"]) != \
        (other.config["task"]["name"], other.config["algo"]["name"])


def test_a_science_change_still_changes_the_hash(tmp_path):
    base = _spec("algo=grpo", root=tmp_path)
    assert _spec("algo=grpo", "algo.kl_coef=0.01", root=tmp_path).config_hash != base.config_hash
    assert _spec("algo=grpo", "task.vocab_size=8", root=tmp_path).config_hash != base.config_hash


@pytest.mark.slow
def test_a_run_done_under_one_name_is_skipped_under_the_other(tmp_path):
    tiny = ["task.episodes=2", "task.batch_size=4", "task.sequence_length=3", "threads=1"]
    assert run_here(tmp_path, "task=demo", "algo=grpo_no_kl", *tiny)["status"] == "completed"
    proc = run_bench("task=demo", "algo=grpo", "algo.kl_coef=0", *tiny, f"output_root={tmp_path}")
    assert "[skip]" in proc.stdout and "grpo_no_kl" in proc.stdout
    assert len(list(schema.run_dirs(tmp_path))) == 1


def _legacy_tree(tmp_path) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(LEGACY, root)
    return root


@pytest.mark.slow
def test_a_legacy_run_is_refused_until_migrated_then_found(tmp_path, capsys):
    root = _legacy_tree(tmp_path)
    old = next(schema.run_dirs(root / "tabular_single" / "tpo"))
    with pytest.raises(ConfigError, match=r"legacy hash.*python -m tpo_bench\.tools\.migrate"):
        _spec(*COMPLETED, root=root)
    before = pd.read_parquet(old / schema.METRICS)

    proc = subprocess.run([sys.executable, "-m", "tpo_bench.tools.migrate", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "moved 2, already current 0, left 0" in proc.stdout
    spec = _spec(*COMPLETED, root=root)
    assert spec.run_dir.parent.name == spec.config_hash != old.parent.name
    assert not old.exists()
    summary = json.loads((spec.run_dir / schema.SUMMARY).read_text())
    assert summary["config_hash"] == spec.config_hash and summary["legacy_config_hash"] == old.parent.name
    after = pd.read_parquet(spec.run_dir / schema.METRICS)
    assert (after["config_hash"] == spec.config_hash).all()
    pd.testing.assert_frame_equal(after.drop(columns="config_hash"), before.drop(columns="config_hash"))
    # the same command now skips it
    proc = run_bench(*COMPLETED, f"output_root={root}")
    assert "[skip]" in proc.stdout
    # a second migration finds nothing to do (its main, in here)
    capsys.readouterr()
    assert migrate.main([str(root)]) == 0
    assert "moved 0, already current 2, left 0" in capsys.readouterr().out


@pytest.mark.slow
def test_a_migrated_checkpoint_resumes_to_the_uninterrupted_curve(tmp_path):
    """A run stopped at a checkpoint under its legacy hash resumes, once migrated, to the
    curve of a run never stopped. Recorded here and made legacy (conftest.as_legacy), so
    both curves come from this CPU's kernels: bit for bit on any machine."""
    root = tmp_path / "runs"
    p = start(*INTERRUPTED, "debug.sleep=0.02", f"output_root={root}")
    wait_for(lambda: list(root.rglob(schema.CHECKPOINT)))
    p.send_signal(signal.SIGTERM)  # stops at the next episode, with a checkpoint there
    p.wait()
    [run] = run_dirs(root)
    stopped = len(pd.read_parquet(run / schema.METRICS))
    assert 0 < stopped < 200 and summary(run)["status"] == schema.INTERRUPTED
    legacy = as_legacy(run)
    with pytest.raises(ConfigError, match="legacy hash"):
        _spec(*INTERRUPTED, root=root)
    assert migrate.main([str(root)]) == 0
    spec = _spec(*INTERRUPTED, root=root)
    assert spec.run_dir == run and not legacy.exists()
    proc = run_bench(*INTERRUPTED, f"output_root={root}")
    assert f"resumed from checkpoint at step {stopped}" in proc.stdout, proc.stdout
    fresh_root = tmp_path / "fresh"
    run_bench(*INTERRUPTED, f"output_root={fresh_root}")
    resumed, fresh = metrics(spec.run_dir), metrics(_spec(*INTERRUPTED, root=fresh_root).run_dir)
    assert len(resumed) == 200
    # Bit for bit (assert_frame_equal's default is a 1e-5 relative tolerance).
    pd.testing.assert_frame_equal(resumed, fresh, check_exact=True)


def test_migration_leaves_what_it_cannot_place(tmp_path):
    root = _legacy_tree(tmp_path)
    old = next(schema.run_dirs(root / "tabular_single" / "tpo"))
    spec_config = json.loads((old / schema.CONFIG).read_text())
    taken = schema.run_dir(root, "tabular_single", "tpo", config_hash(spec_config), 0)
    taken.mkdir(parents=True)
    assert migrate.main([str(root)]) == 1
    assert old.exists() and taken.exists() and not any(taken.iterdir())


def test_dry_run_moves_nothing(tmp_path):
    root = _legacy_tree(tmp_path)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert migrate.main([str(root), "--dry-run"]) == 0
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


@pytest.mark.slow  # takes seconds in process
def test_a_legacy_table_is_rekeyed_to_the_hashes_build_gives(tmp_path):
    """reproduction/results.parquet predates the change: every one of its configs is
    re-keyed, each only because its legacy hash recomputes from its own columns, and to
    the hash `build` gives the same config today."""
    table = pd.read_parquet(REPO / "reproduction" / "results.parquet",
                            columns=None).drop_duplicates("config_hash")
    rekeyed, mapping = rekey.rekey_table(table)
    assert set(mapping) == set(table["config_hash"])
    row = table[(table["task.name"] == "reverse_h10") & (table["algo.name"] == "tpo")
                & (table["match"] == "prompts")].iloc[0]
    spec = _spec("task=reverse_h10", "algo=tpo", root=tmp_path)
    assert mapping[row["config_hash"]] == spec.config_hash
    # a table already current is left alone, and a hash nobody can recompute is not guessed
    assert rekey.rekey_table(rekeyed)[1] == {}
    forged = table.head(1).assign(config_hash="0123456789")
    assert rekey.rekey_table(forged)[1] == {}


def test_legacy_hash_matches_a_committed_legacy_run():
    """Pinned against a committed legacy-hashed run: its folder name is its legacy hash."""
    run = next(schema.run_dirs(LEGACY / "tabular_single" / "tpo"))
    config = json.loads((run / schema.CONFIG).read_text())
    assert legacy_hash(config) == run.parent.name != config_hash(config)
