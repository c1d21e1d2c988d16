"""Run integrity under faults: a signal, a full disk, a damaged file or an unwritable
metrics table is recorded, never corrupts or mislabels a result silently."""
import os
import re
import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch

from conftest import REPO, metrics, run_bench, run_dirs, run_here, summary
from integrity_runs import (SLOW, interrupted_run, reference, start, the_run,  # reference: a fixture
                            wait_line)


# ------------------------------------------------------------------ item 7: signals

@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_checkpoints_at_the_boundary_and_records_interrupted(tmp_path, reference, sig,
                                                                         capsys):
    args = [*SLOW, "checkpoint_every=1000"]
    p = start(*args, "debug.sleep=0.3", f"output_root={tmp_path}")
    wait_line(p, "step 2/12")  # a few episodes in; the periodic checkpoint (every 1000) never comes
    p.send_signal(sig)
    assert p.wait(timeout=120) == 128 + sig
    d = the_run(tmp_path)
    s = summary(d)
    assert s["status"] == "interrupted" and s["reason"] == signal.Signals(sig).name
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    assert 0 < state["next_step"] < 12 and len(state["rows"]) == state["next_step"]
    capsys.readouterr()
    assert run_here(tmp_path, *args)["status"] == "completed"  # the resume: the runner's, in here
    assert f"resumed from checkpoint at step {state['next_step']}" in capsys.readouterr().out
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory):
    """Seed -> metrics of the local-sweep tests' runs, uninterrupted (trained in here)."""
    root = tmp_path_factory.mktemp("sweep-ref")
    for seed in range(3):
        assert run_here(root, *SLOW, "checkpoint_every=1000", f"seed={seed}")["status"] == "completed"
    return {int(d.name.split("=")[1]): metrics(d) for d in run_dirs(root)}


@pytest.mark.slow
@pytest.mark.parametrize("how, n_jobs, seeds, n_running", [("sigterm_to_the_sweep", 2, 3, 2),
                                                           ("ctrl_c_to_the_group", 8, 2, 2)])
def test_a_local_sweep_stops_every_running_run_at_its_boundary(tmp_path, capsys, sweep_reference, how,
                                                               n_jobs, seeds, n_running):
    """hydra/launcher=local: a worker that stops ends its job normally, so the launcher
    kills no other worker mid-episode; every running run checkpoints at its boundary, no
    queued run starts, and the same command finishes all of them to an uninterrupted sweep's
    metrics. SIGTERM: 2 workers for 3 jobs, so one job is queued when the sweep stops.
    Ctrl-C: n_jobs=8 for 2 jobs: the sweeper starts 2 workers, not 8 (an idle one,
    unguarded, would die of the Ctrl-C and the launcher would kill the rest); its runs,
    stopped as SIGTERM's are, resume in this process (a second sweep is the SIGTERM case's)."""
    sweep = ["-m", *SLOW, "checkpoint_every=1000", f"seed={','.join(map(str, range(seeds)))}",
             "hydra/launcher=local", f"hydra.launcher.n_jobs={n_jobs}"]
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
    assert (f"{seeds - n_running} not started" in rest) == (n_running < seeds) and f"stopped by {sig.name}" in rest, rest
    assert not list((tmp_path / "runs").rglob("STOP"))  # the stop request does not outlive the sweep
    if how == "sigterm_to_the_sweep":  # the same command finishes them, the queued one too
        again = run_bench(*sweep, f"output_root={tmp_path / 'runs'}")
        assert again.stdout.count("resumed from checkpoint") == n_running, again.stdout
    else:  # what a Ctrl-C left resumes as a SIGTERM's does: each run resumed, in here
        capsys.readouterr()
        for seed in range(seeds):
            assert run_here(tmp_path / "runs", *SLOW, "checkpoint_every=1000", f"seed={seed}")["status"] \
                == "completed"
        assert capsys.readouterr().out.count("resumed from checkpoint") == n_running
    assert sorted(d.name for d in run_dirs(tmp_path / "runs")) == [f"seed={i}" for i in range(seeds)]
    for seed in range(seeds):
        [a] = [d for d in run_dirs(tmp_path / "runs") if d.name == f"seed={seed}"]
        pd.testing.assert_frame_equal(metrics(a), sweep_reference[seed], check_exact=True)


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
    assert run_here(small_disk, *SLOW)["status"] == "failed"  # the runner's record, in here
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

DAMAGED = [("", "is empty"), ("{\"status\": ", "is not valid JSON"),
           ("[1, 2]", "holds a JSON list, not an object")]


@pytest.mark.slow
@pytest.mark.parametrize("content,what", DAMAGED)
def test_damaged_summary_is_named_with_the_fix(tmp_path, content, what):
    """Each way summary.json can be unreadable, at the runner (in here); the command line's
    handling of the refusal is the next test's."""
    d = interrupted_run(tmp_path)
    (d / "summary.json").write_text(content)
    answer = run_here(tmp_path, *SLOW)
    assert answer["status"] == "refused"
    assert f"{d / 'summary.json'} {what}" in answer["reason"] and "force=true" in answer["reason"]
    assert (d / "summary.json").read_text() == content


@pytest.mark.slow
def test_a_damaged_summary_refuses_its_run_and_the_sweep_goes_on(tmp_path):
    content, what = DAMAGED[0]
    d = interrupted_run(tmp_path)
    (d / "summary.json").write_text(content)
    proc = run_bench("-m", *SLOW, "seed=0,1", f"output_root={tmp_path}", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{d / 'summary.json'} {what}" in proc.stderr and "force=true" in proc.stderr
    assert "1 completed, 0 failed, 1 refused" in proc.stdout  # the other job ran; the report
    assert (d / "summary.json").read_text() == content


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_checkpoint_is_named_with_the_fix(tmp_path, damage):
    d = interrupted_run(tmp_path)
    ck = d / "checkpoint.pt"
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 3] if damage == "truncate" else os.urandom(2048))
    proc = run_bench(*SLOW, f"output_root={tmp_path}", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{ck} is damaged" in proc.stderr and "force=true" in proc.stderr
    assert "weights_only" not in proc.stderr + proc.stdout


# ------------------------------------------------------------------ item 9: permissions

@pytest.mark.slow  # starts a process (git, for the run's commit)
def test_output_files_follow_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        assert run_here(tmp_path, *SLOW)["status"] == "completed"
    finally:
        os.umask(old)
    d = the_run(tmp_path)
    for name in ("summary.json", "config.json", "metrics.parquet"):
        assert (d / name).stat().st_mode & 0o777 == 0o664, name
