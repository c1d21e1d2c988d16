"""Run integrity: the same command gives the same numbers, and no fault --
a second process, a foreign checkpoint, a signal, a full disk, a damaged file --
corrupts or mislabels a result silently."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import REPO, TINY, metrics, run_bench, run_dirs, summary, wait_for

SLOW = [*TINY, "task.episodes=12", "checkpoint_every=3"]


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})


def wait_line(p: subprocess.Popen, text: str) -> None:
    """Read the process's output until a line contains `text`."""
    for line in p.stdout:
        if text in line:
            return
    raise AssertionError(f"{text!r} never printed")


def the_run(root: Path) -> Path:
    [d] = run_dirs(root)
    return d


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    run_bench(*SLOW, f"output_root={root}")
    return metrics(the_run(root))


# ------------------------------------------------------------------ item 0: determinism

@pytest.mark.slow
def test_default_settings_give_identical_metrics_even_on_shared_cores(tmp_path):
    """Two runs of one command at once, with the default thread setting, on cores they
    share (each other's load): bit-identical metrics. With torch's own default (one thread
    per core) this machine diverged within a few episodes."""
    args = ["task=demo", "task.episodes=30", "log_every=100"]
    procs = [start(*args, f"output_root={tmp_path / name}") for name in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stdout.read()
    a, b = (metrics(the_run(tmp_path / name)) for name in ("a", "b"))
    pd.testing.assert_frame_equal(a, b, check_exact=True)


# ------------------------------------------------------------------ item 1: one process per run

@pytest.mark.slow
def test_second_process_on_a_held_run_skips_it_naming_the_holder(tmp_path, reference):
    first = start(*SLOW, "debug.sleep=2.5", f"output_root={tmp_path}")  # outlasts the second's start
    wait_for(lambda: list(tmp_path.rglob("checkpoint.pt")))
    second = run_bench(*SLOW, f"output_root={tmp_path}", check=False)
    assert second.returncode == 1
    assert f"held by pid {first.pid}" in second.stderr and "skipped" in second.stderr
    assert first.wait(timeout=300) == 0
    d = the_run(tmp_path)
    s = summary(d)
    # the second process neither trained nor counted an attempt nor removed a temp file
    assert s["status"] == "completed" and s["attempts"] == 1 and len(s["attempts_log"]) == 1
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
def test_a_killed_holder_leaves_no_stale_lock(tmp_path, reference):
    first = start(*SLOW, "debug.sleep=0.3", f"output_root={tmp_path}")
    wait_for(lambda: list(tmp_path.rglob("checkpoint.pt")))
    first.send_signal(signal.SIGKILL)
    first.wait()
    again = run_bench(*SLOW, f"output_root={tmp_path}")
    assert "resumed from checkpoint" in again.stdout
    pd.testing.assert_frame_equal(metrics(the_run(tmp_path)), reference, check_exact=True)


# ------------------------------------------------------------------ item 2: checkpoint identity

def _interrupted_run(root: Path, *args: str) -> Path:
    """A run with a checkpoint at step 3, as a kill leaves it."""
    p = start(*SLOW, *args, "debug.sleep=0.3", f"output_root={root}")
    wait_for(lambda: list(root.rglob("checkpoint.pt")))
    p.send_signal(signal.SIGKILL)
    p.wait()
    return the_run(root)


@pytest.mark.slow
@pytest.mark.parametrize("theirs,ours,field,values", [
    (["optim.lr=0.01"], ["optim.lr=0.001"], "config_hash", None),
    (["seed=0"], ["seed=1"], "seed", ("0", "1")),
    (["task.episodes=40"], ["task.episodes=20"], "episodes", ("40", "20")),
])
def test_checkpoint_from_another_run_is_refused(tmp_path, theirs, ours, field, values):
    src = _interrupted_run(tmp_path / "src", *theirs)
    # the destination: the same command as `ours`, interrupted, with the foreign file copied in
    dst = _interrupted_run(tmp_path / "dst", *ours)
    before = (dst / "summary.json").read_text()
    shutil.copy(src / "checkpoint.pt", dst / "checkpoint.pt")
    proc = run_bench(*SLOW, *ours, f"output_root={tmp_path / 'dst'}", check=False)
    assert proc.returncode == 1
    msg = proc.stderr
    assert str(dst / "checkpoint.pt") in msg and f"its {field} is" in msg and "force=true" in msg
    if values:
        assert f"its {field} is {values[0]}" in msg and f"this run's is {values[1]}" in msg
    assert (dst / "summary.json").read_text() == before  # nothing recorded over it
    forced = run_bench(*SLOW, *ours, "force=true", f"output_root={tmp_path / 'dst'}")
    assert "resumed" not in forced.stdout and summary(dst)["status"] == "completed"


@pytest.mark.slow
def test_old_checkpoint_without_identity_resumes_only_in_its_own_directory(tmp_path, reference):
    d = _interrupted_run(tmp_path / "a")
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    del state["identity"]  # as written before identity was recorded
    torch.save(state, d / "checkpoint.pt")
    # the whole directory copied under another seed: its config.json gives it away
    moved = tmp_path / "b" / d.relative_to(tmp_path / "a").parent / "seed=1"
    shutil.copytree(d, moved)
    refused = run_bench(*SLOW, "seed=1", f"output_root={tmp_path / 'b'}", check=False)
    assert refused.returncode == 1 and "records no identity" in refused.stderr
    assert "config.json has seed 0, this run's is 1" in refused.stderr
    resumed = run_bench(*SLOW, f"output_root={tmp_path / 'a'}")
    assert "predates identity records" in resumed.stdout
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
def test_resume_across_a_code_change_is_recorded_and_can_be_refused(tmp_path, reference):
    d = _interrupted_run(tmp_path)
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    state["identity"]["git_commit"] = "0123abc"
    torch.save(state, d / "checkpoint.pt")
    s = summary(d)
    s["git_commit"], s["attempts_log"][0]["git_commit"] = "0123abc", "0123abc"
    (d / "summary.json").write_text(json.dumps(s))
    refused = run_bench(*SLOW, "resume_across_commits=false", f"output_root={tmp_path}", check=False)
    assert refused.returncode == 1 and "0123abc" in refused.stderr
    assert "resume_across_commits" in refused.stderr
    resumed = run_bench(*SLOW, f"output_root={tmp_path}")
    assert "resuming across a code change" in resumed.stdout
    s = summary(d)
    assert s["git_commits"][0] == "0123abc" and len(s["git_commits"]) == 2
    assert s["git_commits"][1] == s["git_commit"] != "0123abc"


@pytest.mark.slow
def test_threads_changed_on_resume_is_recorded(tmp_path):
    d = _interrupted_run(tmp_path, "threads=2")
    again = run_bench(*SLOW, "threads=1", f"output_root={tmp_path}")
    assert "threads [2, 1] across attempts" in again.stdout  # in the order they ran
    s = summary(d)
    assert s["threads_used"] == [2, 1] and [a["threads"] for a in s["attempts_log"]] == [2, 1]


@pytest.mark.slow
def test_cpu_kernels_changed_on_resume_is_recorded(tmp_path):
    """A checkpoint written where torch's kernels were another instruction set's (an AVX2
    node, then an AVX512 one) resumes, and the record says so."""
    d = _interrupted_run(tmp_path)
    s = summary(d)
    ours = s["attempts_log"][0]["cpu_kernels"]
    s["attempts_log"][0]["cpu_kernels"] = theirs = "AVX2" if ours != "AVX2" else "AVX512"
    (d / "summary.json").write_text(json.dumps(s))
    again = run_bench(*SLOW, f"output_root={tmp_path}")
    assert f"CPU kernels ['{theirs}', '{ours}'] across attempts" in again.stdout
    assert [a["cpu_kernels"] for a in summary(d)["attempts_log"]] == [theirs, ours]


# ------------------------------------------------------------------ item 7: signals

@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_checkpoints_at_the_boundary_and_records_interrupted(tmp_path, reference, sig):
    args = [*SLOW, "checkpoint_every=1000", "debug.sleep=0.3", f"output_root={tmp_path}"]
    p = start(*args)
    wait_line(p, "step 2/12")  # a few episodes in; the periodic checkpoint (every 1000) never comes
    p.send_signal(sig)
    assert p.wait(timeout=120) == 128 + sig
    d = the_run(tmp_path)
    s = summary(d)
    assert s["status"] == "interrupted" and s["reason"] == signal.Signals(sig).name
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    assert 0 < state["next_step"] < 12 and len(state["rows"]) == state["next_step"]
    again = run_bench(*args[:-2], f"output_root={tmp_path}")
    assert f"resumed from checkpoint at step {state['next_step']}" in again.stdout
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
@pytest.mark.parametrize("how, n_jobs, n_running", [("sigterm_to_the_sweep", 2, 2),
                                                    ("ctrl_c_to_the_group", 8, 3)])
def test_a_local_sweep_stops_every_running_run_at_its_boundary(tmp_path, how, n_jobs, n_running):
    """hydra/launcher=local: before, the first worker to stop raised out of its job and the
    launcher killed the other worker mid-episode (its episodes since its last checkpoint
    lost). Now every running run checkpoints at its boundary, no queued run starts, and
    the same command finishes all of them to an uninterrupted sweep's metrics. n_jobs=8 for
    3 jobs: the sweeper starts 3 workers, not 8 (an idle one, unguarded, would die of the
    Ctrl-C and the launcher would kill the rest)."""
    sweep = ["-m", *SLOW, "checkpoint_every=1000", "seed=0,1,2", "hydra/launcher=local",
             f"hydra.launcher.n_jobs={n_jobs}"]
    p = subprocess.Popen([sys.executable, "-m", "bench", *sweep, "debug.sleep=0.3",
                          f"output_root={tmp_path / 'runs'}"], cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    running: set[int] = set()
    for line in p.stdout:
        if m := re.search(r"seed=(\d)\] step 2/12", line):
            running.add(int(m.group(1)))
        if len(running) == n_running:
            break
    sig = signal.SIGTERM if how == "sigterm_to_the_sweep" else signal.SIGINT
    if sig == signal.SIGTERM:
        p.send_signal(sig)  # the sweep's process only: it tells its workers
    else:
        os.killpg(p.pid, sig)  # what a terminal's Ctrl-C does: every process of the group
    rest = p.stdout.read()
    assert p.wait(timeout=300) == 128 + sig, rest
    dirs = run_dirs(tmp_path / "runs")
    assert {int(d.name.split("=")[1]) for d in dirs} == running, rest  # a queued one never started
    for d in dirs:
        s = summary(d)
        assert s["status"] == "interrupted" and s["reason"] == sig.name, (d, s["status"], rest)
        state = torch.load(d / "checkpoint.pt", weights_only=True)
        assert 2 <= state["next_step"] < 12 and len(state["rows"]) == state["next_step"]
    assert (f"{3 - n_running} not started" in rest) == (n_running < 3) and f"stopped by {sig.name}" in rest, rest
    assert not list((tmp_path / "runs").rglob("STOP"))  # the stop request does not outlive the sweep
    again = run_bench(*sweep, f"output_root={tmp_path / 'runs'}")
    assert again.stdout.count("resumed from checkpoint") == n_running, again.stdout
    run_bench(*sweep[:-2], f"output_root={tmp_path / 'ref'}")  # uninterrupted, basic launcher
    for seed in range(3):
        [a] = [d for d in run_dirs(tmp_path / "runs") if d.name == f"seed={seed}"]
        [b] = [d for d in run_dirs(tmp_path / "ref") if d.name == f"seed={seed}"]
        pd.testing.assert_frame_equal(metrics(a), metrics(b), check_exact=True)


@pytest.mark.slow
def test_usr2_checkpoints_at_once_and_training_goes_on(tmp_path, reference):
    p = start(*SLOW, "checkpoint_every=1000", "debug.sleep=0.3", f"output_root={tmp_path}")
    wait_line(p, "step 2/12")
    p.send_signal(signal.SIGUSR2)
    rest = p.stdout.read()  # to the end: the run goes on after the checkpoint
    assert p.wait(timeout=300) == 0
    step = re.search(r"checkpoint at step (\d+) \(SIGUSR2\)", rest)
    assert step and 2 <= int(step.group(1)) < 12, rest
    d = the_run(tmp_path)
    assert summary(d)["status"] == "completed"
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


# ------------------------------------------------------------------ item 6: I/O errors

@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs: room for a run's small files, not for a checkpoint (~1.2 MB)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_disk_full_mid_run_is_recorded_as_failed_with_the_os_error(small_disk):
    proc = run_bench(*SLOW, f"output_root={small_disk}", check=False)
    assert proc.returncode == 1
    d = the_run(small_disk)
    s = summary(d)
    assert s["status"] == "failed" and s["error_kind"] == "io"
    assert "No space left on device" in s["reason"]
    assert not list(d.glob(".*.tmp"))  # the torn checkpoint temp does not stay on the full disk
    assert not (d / "checkpoint.pt").exists()


def test_metrics_that_cannot_be_written_turn_the_record_into_failed(tmp_path, monkeypatch):
    """The table is written before the summary: when the disk refuses the table, the
    summary (small) says failed with both reasons instead of the status the run had."""
    import errno

    from tpo_bench.bench import rundir
    from tpo_bench.contract import io

    def full(path, df):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io, "write_parquet", full)
    rd = rundir.RunDir(tmp_path)
    out = rd.finish(pd.DataFrame({"step": [0]}), status="completed")
    on_disk = summary(tmp_path)
    assert on_disk == out and out["status"] == "failed" and out["error_kind"] == "io"
    assert "metrics.parquet" in out["reason"] and "No space left" in out["reason"]


# ------------------------------------------------------------------ item 8: damaged files

@pytest.mark.slow
@pytest.mark.parametrize("content,what", [("", "is empty"), ("{\"status\": ", "is not valid JSON"),
                                          ("[1, 2]", "holds a JSON list, not an object")])
def test_damaged_summary_is_named_with_the_fix(tmp_path, content, what):
    d = _interrupted_run(tmp_path)
    (d / "summary.json").write_text(content)
    proc = run_bench("-m", *SLOW, "seed=0,1", f"output_root={tmp_path}", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{d / 'summary.json'} {what}" in proc.stderr and "force=true" in proc.stderr
    assert "1 completed, 0 failed, 1 refused" in proc.stdout  # the other job ran; the report
    assert (d / "summary.json").read_text() == content


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_checkpoint_is_named_with_the_fix(tmp_path, damage):
    d = _interrupted_run(tmp_path)
    ck = d / "checkpoint.pt"
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 3] if damage == "truncate" else os.urandom(2048))
    proc = run_bench(*SLOW, f"output_root={tmp_path}", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{ck} is damaged" in proc.stderr and "force=true" in proc.stderr
    assert "weights_only" not in proc.stderr + proc.stdout


# ------------------------------------------------------------------ item 9: permissions

@pytest.mark.slow
def test_output_files_follow_the_umask(tmp_path):
    p = subprocess.run(["sh", "-c", f"umask 002 && exec {sys.executable} -m bench "
                        + " ".join([*SLOW, "debug.sleep=0.2", f"output_root={tmp_path}"])],
                       cwd=REPO, text=True, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr
    d = the_run(tmp_path)
    for name in ("summary.json", "config.json", "metrics.parquet"):
        assert (d / name).stat().st_mode & 0o777 == 0o664, name
