"""Interrupted, failed and badly configured runs."""
import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch

from conftest import REPO, TINY, compose, metrics, run_bench, run_dirs, run_here, summary, wait_for
from integrity_runs import SLOW, reference  # reference: a fixture


def start_bench(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def collect_here(root, tmp_path, *flags, capsys):
    """analysis/collect.py's main, in here (its exit status as a script:
    tests/test_collect_integrity.py): its return value and what it printed."""
    from tpo_bench.analysis import collect

    capsys.readouterr()
    rc = collect.main([str(root), "--out", str(tmp_path / "r.parquet"), *flags])
    return rc, capsys.readouterr().out


@pytest.mark.slow
def test_sigkill_mid_run_resumes_to_identical_metrics(tmp_path, reference, capsys):
    proc = start_bench(*SLOW, "debug.sleep=0.25", f"output_root={tmp_path}")
    wait_for(lambda: list(tmp_path.rglob("checkpoint.pt")))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [d] = run_dirs(tmp_path)
    assert summary(d)["status"] == "running" and (d / "checkpoint.pt").exists()
    # collect calls it incomplete, not completed, and never loses it
    rc, out = collect_here(tmp_path, tmp_path, "--stale-after", "0", capsys=capsys)
    assert "heartbeat stale" in out and rc == 1
    # the checkpoint is a plain tensor file: it loads without unpickling objects
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    assert state["next_step"] % 3 == 0 and len(state["rows"]) == state["next_step"]
    again = run_bench(*SLOW, f"output_root={tmp_path}")
    assert f"resumed from checkpoint at step {state['next_step']}" in again.stdout
    s = summary(d)
    assert s["status"] == "completed" and s["attempts"] == 2
    assert not (d / "checkpoint.pt").exists()  # removed on success
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_resumes_from_previous(tmp_path, reference):
    proc = start_bench(*SLOW, "debug.checkpoint_pause=2", f"output_root={tmp_path}")
    # first checkpoint (step 3) lands; kill while the step-6 one is still a temp file
    wait_for(lambda: list(tmp_path.rglob("checkpoint.pt")) and list(tmp_path.rglob(".checkpoint.pt.*.tmp")))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [d] = run_dirs(tmp_path)
    assert list(d.glob(".checkpoint.pt.*.tmp"))  # the torn write is there ...
    assert torch.load(d / "checkpoint.pt", weights_only=True)["next_step"] == 3  # ... the old one intact
    again = run_bench(*SLOW, f"output_root={tmp_path}")
    assert "resumed from checkpoint at step 3" in again.stdout
    assert not list(d.glob("*.tmp")) and not list(d.glob(".*.tmp"))
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
def test_nan_marks_run_failed_and_sweep_goes_on(tmp_path, capsys):
    # job 0 (12 episodes) hits the injected NaN at step 5; job 1 (4 episodes) never does
    proc = run_bench("-m", *TINY, "task.episodes=12,4", "debug.nan_at=5",
                     f"output_root={tmp_path}", check=False)
    assert proc.returncode == 1
    assert "1 completed, 1 failed" in proc.stdout
    dirs = {summary(d)["status"]: d for d in run_dirs(tmp_path)}
    assert set(dirs) == {"failed", "completed"}
    failed = dirs["failed"]
    assert "non-finite loss nan at step 5" in summary(failed)["reason"]
    partial = pd.read_parquet(failed / "metrics.parquet")
    assert list(partial["step"]) == [0, 1, 2, 3, 4] and partial["partial"].all()
    assert not pd.read_parquet(dirs["completed"] / "metrics.parquet")["partial"].any()
    rc, out = collect_here(tmp_path, tmp_path, "--allow-skips", capsys=capsys)
    assert rc == 0  # the failed run is skipped and named; the good one kept
    assert "failed (1):" in out and "non-finite loss" in out
    assert len(pd.read_parquet(tmp_path / "r.parquet")) == 4
    # the same sweep without the fault repairs what failed and skips what is done
    again = run_bench("-m", *TINY, "task.episodes=12,4", f"output_root={tmp_path}")
    assert again.stdout.count("[skip]") == 1 and "2 completed, 0 failed" in again.stdout
    assert all(summary(d)["status"] == "completed" for d in run_dirs(tmp_path))


@pytest.mark.slow
def test_single_failed_run_exits_nonzero(tmp_path):
    proc = run_bench(*TINY, "debug.nan_at=0", f"output_root={tmp_path}", check=False)
    assert proc.returncode == 1 and "FAILED" in proc.stderr


@pytest.mark.slow
def test_force_reruns_completed(tmp_path):
    assert run_here(tmp_path, *TINY)["status"] == "completed"  # the first run, in here
    again = run_bench(*TINY, f"output_root={tmp_path}")
    assert "[skip]" in again.stdout
    forced = run_bench(*TINY, "force=true", f"output_root={tmp_path}")
    assert "[skip]" not in forced.stdout and summary(run_dirs(tmp_path)[0])["attempts"] == 1


@pytest.mark.slow
def test_seeds_per_job_packs_seeds_into_one_job(tmp_path):
    proc = run_bench("-m", *TINY, "seed=0,3", "seeds_per_job=3", f"output_root={tmp_path / 'packed'}")
    assert "2 jobs, 6 runs: 6 completed" in proc.stdout
    packed = {d.name: d for d in run_dirs(tmp_path / "packed")}
    assert sorted(packed) == [f"seed={i}" for i in range(6)]
    run_here(tmp_path / "alone", *TINY, "seed=4")  # seed 4 trained alone, in here
    [alone] = run_dirs(tmp_path / "alone")
    pd.testing.assert_frame_equal(metrics(packed["seed=4"]), metrics(alone), check_exact=True)


# One command per way `python -m bench` refuses a bad line, each exiting non-zero before
# it creates anything: checked up front (config.check_overrides), by the sweeper as it
# validates its jobs, by Hydra as it composes.
@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["seeds_per_job=0"], "seeds_per_job must be a positive integer"),
    (["-m", "seed=0,1", "seeds_per_job=2"], "would train the same seed twice"),
    (["hydra/launcher=nope"], "hydra/launcher/nope"),
])
def test_bad_sweeps_create_nothing(args, message, tmp_path):
    flags = [a for a in args if a == "-m"]
    proc = run_bench(*flags, *TINY, *[a for a in args if a != "-m"], f"output_root={tmp_path / 'out'}",
                     check=False)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
    assert not (tmp_path / "out").exists()  # no run directory, no sweep directory


# The rest of the table, where the command above would meet each: before Hydra composes
# (config.check_overrides), or as a job's config is built (jobs.job_specs, the call the
# sweeper makes for every job before launching any).
@pytest.mark.parametrize("args,message", [
    (["algo=tpo,nope"], "algo=nope: no such algorithm"),
    (["checkpoint_every=0"], "checkpoint_every must be a positive integer"),
])
def test_bad_overrides_are_refused_before_hydra_composes(args, message, tmp_path):
    from tpo_bench.bench.config import ConfigError, check_overrides

    with pytest.raises(ConfigError, match=message):
        check_overrides([*TINY, *args, f"output_root={tmp_path / 'out'}"])


@pytest.mark.parametrize("args,message", [
    (["algo=tpo", "task.batch_size=0"], "task.batch_size must be a positive integer"),
    (["seed=0", "algo=grpo_token", "task=reverse_h7"], "algo.level=token"),
])
def test_bad_jobs_are_refused_as_the_sweeper_validates_them(args, message, tmp_path):
    from tpo_bench.bench.build import ConfigError
    from tpo_bench.bench.config import check_overrides
    from tpo_bench.bench.jobs import explicit_keys, job_specs

    line = [*TINY, *args, f"output_root={tmp_path / 'out'}"]
    check_overrides(line)  # passes the up-front check: the job's build refuses it
    with pytest.raises(ConfigError, match=message):
        job_specs(compose(*line), explicit_keys(line))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_unwritable_output_root(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_bench(*TINY, f"output_root={blocker / 'out'}", check=False)
    assert proc.returncode == 2 and f"output_root={blocker / 'out'}" in proc.stderr


def test_an_output_root_the_os_refuses_is_refused_before_any_run(tmp_path):
    """The same check as above, the other way it refuses (procfs refuses new files even
    to root: a real "cannot write" case as root), at the build the command makes."""
    from tpo_bench.bench.build import ConfigError, build

    with pytest.raises(ConfigError, match="output_root=/proc/tpo-bench-out: cannot write under /proc"):
        build(compose(*TINY, "output_root=/proc/tpo-bench-out"))


@pytest.mark.slow
def test_missing_launcher_plugin_is_named(tmp_path):
    conf = tmp_path / "conf" / "hydra" / "launcher"
    conf.mkdir(parents=True)
    (conf / "ghost.yaml").write_text("_target_: hydra_plugins.ghost_launcher.GhostLauncher\n")
    proc = run_bench("-m", *TINY, "hydra/launcher=ghost", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                     f"output_root={tmp_path / 'out'}", check=False)
    assert proc.returncode == 2
    assert "hydra/launcher could not be created" in proc.stderr and "install its plugin" in proc.stderr
    assert not (tmp_path / "out").exists()
