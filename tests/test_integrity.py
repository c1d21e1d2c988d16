"""Run integrity: the same command gives the same numbers, and no second process or
foreign checkpoint corrupts or mislabels a result silently (signals, a full disk and
damaged files: tests/test_integrity_faults.py)."""
import json
import shutil
import signal

import pandas as pd
import pytest
import torch

from conftest import cpu_vendor, metrics, run_bench, run_dirs, run_here, summary, wait_for
from integrity_runs import SLOW, interrupted_run, reference, start, the_run  # reference: a fixture


# ------------------------------------------------------------------ item 0: determinism

@pytest.mark.slow
def test_default_settings_give_identical_metrics_even_on_shared_cores(tmp_path):
    """Two runs of one command at once, with the default thread setting, on cores they
    share (each other's load): bit-identical metrics. With threads=0 (a thread per allotted
    core) two such runs on this 2-core machine already differ at step 0: 8 episodes suffice."""
    args = ["task=demo", "task.episodes=8", "log_every=100"]
    procs = [start(*args, f"output_root={tmp_path / name}") for name in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stdout.read()
    a, b = (metrics(the_run(tmp_path / name)) for name in ("a", "b"))
    pd.testing.assert_frame_equal(a, b, check_exact=True)


# ------------------------------------------------------------------ item 1: one process per run

@pytest.mark.slow
def test_second_process_on_a_held_run_skips_it_naming_the_holder(tmp_path, reference):
    first = start(*SLOW, "debug.sleep=0.3", f"output_root={tmp_path}")
    wait_for(lambda: any(str(first.pid) in p.read_text() for p in tmp_path.rglob(".lock")))
    first.send_signal(signal.SIGSTOP)  # holds the run however long the second takes to start
    try:
        second = run_bench(*SLOW, f"output_root={tmp_path}", check=False)
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 1
    assert f"held by pid {first.pid}" in second.stderr and "skipped" in second.stderr
    assert first.wait(timeout=300) == 0
    d = the_run(tmp_path)
    s = summary(d)
    # the second process neither trained nor counted an attempt nor removed a temp file
    assert s["status"] == "completed" and s["attempts"] == 1 and len(s["attempts_log"]) == 1
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
def test_a_lock_naming_a_dead_holder_is_not_held(tmp_path, reference):
    """A killed run's directory as its kill left it, .lock naming the dead holder: the same
    command takes the run over and resumes it (a run killed in place and resumed there:
    tests/test_reliability.py)."""
    d = interrupted_run(tmp_path)
    assert (d / ".lock").exists()
    again = run_bench(*SLOW, f"output_root={tmp_path}")
    assert "resumed from checkpoint" in again.stdout
    pd.testing.assert_frame_equal(metrics(the_run(tmp_path)), reference, check_exact=True)


# ------------------------------------------------------------------ item 2: checkpoint identity

@pytest.mark.slow
@pytest.mark.parametrize("theirs,field,values", [
    (["optim.lr=0.01"], "config_hash", None),  # SLOW's is 0.001
    (["seed=1"], "seed", ("1", "0")),
    (["task.episodes=40"], "episodes", ("40", "12")),
])
def test_checkpoint_from_another_run_is_refused(tmp_path, capsys, theirs, field, values):
    # theirs: another config's, seed's or length's run left with its step-3 checkpoint
    # (a NaN at step 4 ends it there; trained in here: what a kill leaves, cheaper)
    assert run_here(tmp_path / "src", *SLOW, *theirs, "debug.nan_at=4")["status"] == "failed"
    [src] = run_dirs(tmp_path / "src")
    # the destination: SLOW, interrupted, with the foreign file copied in
    dst = interrupted_run(tmp_path / "dst")
    before = (dst / "summary.json").read_text()
    shutil.copy(src / "checkpoint.pt", dst / "checkpoint.pt")
    proc = run_bench(*SLOW, f"output_root={tmp_path / 'dst'}", check=False)
    assert proc.returncode == 1
    msg = proc.stderr
    assert str(dst / "checkpoint.pt") in msg and f"its {field} is" in msg and "force=true" in msg
    if values:
        assert f"its {field} is {values[0]}" in msg and f"this run's is {values[1]}" in msg
    assert (dst / "summary.json").read_text() == before  # nothing recorded over it
    capsys.readouterr()
    forced = run_here(tmp_path / "dst", *SLOW, "force=true")  # force's reading: the runner's
    assert "resumed" not in capsys.readouterr().out and forced["status"] == "completed"
    assert summary(dst)["status"] == "completed"


@pytest.mark.slow
def test_old_checkpoint_without_identity_resumes_only_in_its_own_directory(tmp_path, reference):
    d = interrupted_run(tmp_path / "a")
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    del state["identity"]  # as written before identity was recorded
    torch.save(state, d / "checkpoint.pt")
    # the whole directory copied under another seed: its config.json gives it away
    moved = tmp_path / "b" / d.relative_to(tmp_path / "a").parent / "seed=1"
    shutil.copytree(d, moved)
    refused = run_here(tmp_path / "b", *SLOW, "seed=1")  # refusals: the runner's answer, in here
    assert refused["status"] == "refused" and "its path says 1" in refused["reason"]
    # the checkpoint alone, under another seed: it cannot say whose it is
    alone = moved.parent / "seed=2"
    alone.mkdir()
    shutil.copy(d / "checkpoint.pt", alone / "checkpoint.pt")
    refused = run_here(tmp_path / "b", *SLOW, "seed=2")
    assert refused["status"] == "refused" and "records no identity" in refused["reason"]
    resumed = run_bench(*SLOW, f"output_root={tmp_path / 'a'}")
    assert "predates identity records" in resumed.stdout
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)


@pytest.mark.slow
def test_resume_across_a_code_change_is_recorded_and_can_be_refused(tmp_path, reference):
    d = interrupted_run(tmp_path)
    state = torch.load(d / "checkpoint.pt", weights_only=True)
    state["identity"]["git_commit"] = "0123abc"
    torch.save(state, d / "checkpoint.pt")
    s = summary(d)
    s["git_commit"], s["attempts_log"][0]["git_commit"] = "0123abc", "0123abc"
    (d / "summary.json").write_text(json.dumps(s))
    refused = run_here(tmp_path, *SLOW, "resume_across_commits=false")  # the runner's answer, in here
    assert refused["status"] == "refused" and "0123abc" in refused["reason"]
    assert "resume_across_commits" in refused["reason"]
    resumed = run_bench(*SLOW, f"output_root={tmp_path}")
    assert "resuming across a code change" in resumed.stdout
    s = summary(d)
    assert s["git_commits"][0] == "0123abc" and len(s["git_commits"]) == 2
    assert s["git_commits"][1] == s["git_commit"] != "0123abc"


@pytest.mark.slow
def test_threads_changed_on_resume_is_recorded(tmp_path, capsys):
    d = interrupted_run(tmp_path, "threads=2")
    capsys.readouterr()
    run_here(tmp_path, *SLOW, "threads=1")  # the resume: the runner's, in here
    assert "threads [2, 1] across attempts" in capsys.readouterr().out  # in the order they ran
    s = summary(d)
    assert s["threads_used"] == [2, 1] and [a["threads"] for a in s["attempts_log"]] == [2, 1]


@pytest.mark.slow
def test_cpu_kernels_changed_on_resume_is_recorded(tmp_path, capsys):
    """A checkpoint written where torch's kernels were another instruction set's (an AVX2
    node, then an AVX512 one) resumes, and the record says so."""
    d = interrupted_run(tmp_path)
    s = summary(d)
    ours = s["attempts_log"][0]["cpu_kernels"]
    s["attempts_log"][0]["cpu_kernels"] = theirs = "AVX2" if ours != "AVX2" else "AVX512"
    (d / "summary.json").write_text(json.dumps(s))
    capsys.readouterr()
    run_here(tmp_path, *SLOW)  # the resume: the runner's, in here
    assert f"CPU kernels ['{theirs}', '{ours}'] across attempts" in capsys.readouterr().out
    assert [a["cpu_kernels"] for a in summary(d)["attempts_log"]] == [theirs, ours]
    # and the CPU itself: one instruction set, two vendors' MKL paths round otherwise
    assert summary(d)["attempts_log"][-1]["cpu"].startswith(cpu_vendor() + ": ")


@pytest.mark.slow  # git in subprocesses
def test_dirty_means_uncommitted_code_not_a_resumed_runs_own_records(tmp_path, monkeypatch):
    """A checkout whose committed run records change as a resumed run trains is not -dirty;
    a changed code file is."""
    import subprocess

    from tpo_bench.contract import io

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.py").write_text("x = 1\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "metrics.parquet").write_text("step 0\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(io, "REPO_ROOT", tmp_path.resolve())
    clean = io.git_commit()
    assert clean and len(clean) == 40
    (tmp_path / "runs" / "metrics.parquet").write_text("step 0\nstep 100\n")
    assert io.git_commit() == clean
    (tmp_path / "tasks" / "t.py").write_text("x = 2\n")
    assert io.git_commit() == clean + "-dirty"


@pytest.mark.slow  # git in subprocesses
def test_an_untracked_module_where_a_run_imports_from_marks_the_commit_dirty(tmp_path, monkeypatch):
    """algorithms/ imports every module in its folder: an untracked one there changes what
    a run does. An untracked script in analysis/ or a note in algorithms/ does not."""
    import subprocess

    from tpo_bench.contract import io

    (tmp_path / "algorithms").mkdir()
    (tmp_path / "algorithms" / "a.py").write_text("x = 1\n")
    (tmp_path / "analysis").mkdir()
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                    "-qm", "c"], check=True)
    monkeypatch.setattr(io, "REPO_ROOT", tmp_path.resolve())
    clean = io.git_commit()
    assert clean and not clean.endswith("-dirty")
    (tmp_path / "analysis" / "scratch.py").write_text("print(1)\n")
    (tmp_path / "algorithms" / "notes.txt").write_text("ideas\n")
    assert io.git_commit() == clean
    (tmp_path / "algorithms" / "zz_local.py").write_text("import torch\n")
    assert io.git_commit() == clean + "-dirty"
