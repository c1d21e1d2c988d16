"""The study queue (tools/study.py): its order, its state, the GPU study's jobs, the
page's queue block and the per-run commits."""
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tpo_bench.tools import study

REPO = Path(__file__).resolve().parent.parent

TINY_QUEUE = """
stages:
  - name: a_mechanism
    why: first on a GPU
    sweeps:
      - {root: runs/m, seeds: [0, 3], cost_s: 10, args: "task=demo task.episodes=3 task.batch_size=4 task.sequence_length=3 algo=tpo,grpo"}
  - name: b
    why: then the rest
    sweeps:
      - {root: runs/t, seeds: [0, 2], cost_s: 100, args: "task=demo task.episodes=3 task.batch_size=4 task.sequence_length=3 algo=dg"}
"""


def _queue(tmp_path, text=TINY_QUEUE) -> Path:
    q = tmp_path / "q.yaml"
    q.write_text(text)
    return q


def test_jobs_are_seed_major_in_stage_order(tmp_path):
    js = study.jobs(study.load(_queue(tmp_path)))
    assert [j.overrides[0] for j in js[:4]] == ["seed=0", "seed=0", "seed=1", "seed=1"]
    assert [j.overrides[-1] for j in js[:2]] == ["algo=tpo", "algo=grpo"]
    assert [j.stage for j in js] == ["a_mechanism"] * 6 + ["b"] * 2


def test_an_unknown_stage_names_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="a_mechanism, b"):
        study.jobs(study.load(_queue(tmp_path)), only="c")


def test_a_mistyped_name_in_a_sweep_is_named_with_the_valid_choices(tmp_path, capsys):
    q = _queue(tmp_path, TINY_QUEUE.replace("algo=dg", "algo=dgg"))
    assert study.main(["status", "--queue", str(q), "--repo", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "algo=dgg: no such algorithm" in err and "did you mean dg" in err and "valid choices:" in err, err
    assert "stage 'b'" in err and "task=demo" in err  # the stage and the run it is in
    assert [p for p in tmp_path.iterdir() if p != q] == []  # nothing created
    q.write_text(TINY_QUEUE.replace("algo=dg", "algo=dg algo.epochs=0"))  # a bad value
    assert study.main(["status", "--queue", str(q), "--repo", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "stage 'b'" in err and "algo.epochs=0" in err, err


def _rows(stage_seeds):
    """Fake survey rows: (job, run dir, state)."""
    out = []
    for stage, over, seeds, done in stage_seeds:
        for s in seeds:
            j = study.Job(stage, "r", (f"seed={s}", *over), 1800.0)
            out.append((j, Path(f"/x/{'-'.join(over)}/seed={s}"), "completed" if s in done else "todo"))
    return out


def test_gpu_packs_group_consecutive_unfinished_seeds_mechanism_first():
    rows = _rows([("b", ("algo=tpo",), range(0, 6), {2}),
                  ("a_mechanism", ("algo=grpo", "algo.k=32"), range(0, 2), set())])
    ps = study.packs(rows)
    assert ps[0].stage == "a_mechanism" and ps[0].seeds == (0, 1)
    assert [p.seeds for p in ps[1:]] == [(0, 1), (3, 4, 5)]
    assert all(len(p.run_dirs) == len(p.seeds) for p in ps)


def test_status_counts_completed_and_cost_left(tmp_path):
    stages = study.load(_queue(tmp_path))
    rows = _rows([("a_mechanism", ("algo=tpo",), range(0, 3), {0, 1}), ("b", ("algo=dg",), range(0, 2), set())])
    table = study.status_table(rows, stages, markdown=True)
    line = next(l for l in table.splitlines() if l.startswith("| a_mechanism"))
    assert [c.strip() for c in line.split("|")[2:6]] == ["3", "2", "0", "1"]
    total = next(l for l in table.splitlines() if l.startswith("| all"))
    assert total.split("|")[6].strip() == "1.5"  # 3 unfinished runs of half an hour each


def test_queue_block_check_and_write(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("x\n<!-- generated:queue -->\nold\n<!-- /generated:queue -->\ny\n")
    assert study.write_block(page, "new\n", check=True) == 1
    assert study.write_block(page, "new\n", check=False) == 0
    assert page.read_text() == "x\n<!-- generated:queue -->\nnew\n<!-- /generated:queue -->\ny\n"
    assert study.write_block(page, "new\n", check=True) == 0
    (tmp_path / "q.md").write_text("no block\n")
    assert study.write_block(tmp_path / "q.md", "new\n", check=False) == 2


@pytest.mark.slow
def test_the_reproducing_pages_queue_block_is_the_queues_state():
    """Every sweep of the committed queue composes, and the page shows its state. Locating
    a run warns of nothing (the DG 4-epoch presets' warning is for their runs)."""
    proc = subprocess.run([sys.executable, "-m", "tools.study", "status", "--page",
                           "docs/reproducing.md", "--check"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


# The gpu command in process (study.main, what `python -m tools.study` runs; the page test
# above runs the command itself): its jobs are `python -m bench` processes either way.


@pytest.mark.slow
def test_gpu_study_runs_every_unfinished_seed_batched_and_packs_them(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    q = _queue(tmp_path)
    out = tmp_path / "out" / "study.tar"
    assert study.main(["gpu", "--queue", str(q), "--repo", str(repo), "--device", "cpu", "--parallel", "2",
                       "--pack", str(out)]) == 0, capsys.readouterr()
    summaries = sorted(repo.rglob("summary.json"))
    assert len(summaries) == 8
    for p in summaries:
        s = json.loads(p.read_text())
        assert s["status"] == "completed"
        assert s["attempts_log"][-1]["batch_seeds"] is True
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert len([n for n in names if n.endswith("metrics.parquet")]) == 8
    assert not any(n.endswith("checkpoint.pt") for n in names)  # completed runs keep none
    from tpo_bench.analysis import collect
    table, _ = collect.collect(repo / "runs")
    assert table.groupby("algo.name")["seed"].nunique().to_dict() == {"dg": 2, "grpo": 3, "tpo": 3}
    # a second call finds nothing left
    capsys.readouterr()
    assert study.main(["gpu", "--queue", str(q), "--repo", str(repo), "--device", "cpu"]) == 0
    assert "0 seed-batched jobs (0 runs)" in capsys.readouterr().out


@pytest.mark.slow
def test_gpu_study_stops_at_its_budget_and_the_runs_resume(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    q = _queue(tmp_path, TINY_QUEUE.replace("task.episodes=3", "task.episodes=20000").replace(
        "seeds: [0, 2], cost_s: 100", "seeds: [0, 0], cost_s: 100").replace("[0, 3]", "[0, 2]"))
    out = tmp_path / "study.tar"
    code = study.main(["gpu", "--queue", str(q), "--repo", str(repo), "--device", "cpu", "--parallel", "1",
                       "--budget-s", "40", "--pack", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed
    assert "1 jobs not started" in printed.out  # grpo's job never began
    states = [json.loads(p.read_text())["status"] for p in sorted(repo.rglob("summary.json"))]
    assert len(states) == 2 and "completed" not in states
    with tarfile.open(out) as tar:  # the stopped runs travel with their checkpoints
        assert len([n for n in tar.getnames() if n.endswith("checkpoint.pt")]) == 2


@pytest.mark.slow
def test_commit_run_commits_only_that_runs_files(tmp_path):
    repo = tmp_path / "g"
    run = repo / "runs" / "demo" / "tpo" / "abc" / "seed=0"
    run.mkdir(parents=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (repo / "other.txt").write_text("staged elsewhere")
    git("add", "other.txt")
    (run / "summary.json").write_text(json.dumps({"task": "demo", "algo": "tpo", "config_hash": "abc",
                                                  "seed": 0, "final": {"error": 0.25}, "git_commit": "c0de"}))
    for f in ("config.json", "metrics.parquet", "checkpoint.pt"):
        (run / f).write_text("x")
    assert study.commit_run(repo, run)
    files = git("show", "--name-only", "--format=%s", "HEAD").stdout.split("\n")
    assert "0.2500" in files[0] and "seed 0" in files[0] and "(final error" in files[0]
    assert files[0].endswith("; 0 KiB)")  # three one-byte files
    assert sorted(f for f in files[1:] if f) == [f"runs/demo/tpo/abc/seed=0/{f}" for f in
                                                 ("config.json", "metrics.parquet", "summary.json")]
    assert "other.txt" in git("diff", "--cached", "--name-only").stdout  # still staged, not committed


@pytest.mark.slow
def test_run_trains_only_at_the_queues_commit(tmp_path):
    repo = tmp_path / "g"
    (repo / "algorithms").mkdir(parents=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (repo / "algorithms" / "x.py").write_text("A = 1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD").stdout.strip()
    assert study.check_code(repo, first[:7]) is None
    run = repo / study.RUNS_PREFIX / "t" / "seed=0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    git("add", ".")
    git("commit", "-qm", "a run record")
    assert study.check_code(repo, first[:7]) is None  # past the pin by run records only
    (repo / "algorithms" / "x.py").write_text("A = 2\n")
    assert "with edits" in study.check_code(repo, first[:7])
    git("commit", "-qam", "two")
    why = study.check_code(repo, first[:7])
    assert why is not None and first[:7] in why and "--repo" in why


PREFIX_QUEUE = """
stages:
  - name: a_mechanism
    why: every line to its first episodes, then to its end
    prefix: 100
    sweeps:
      - {root: runs/m, seeds: [0, 1], cost_s: 10, args: "task=demo task.episodes=200 task.batch_size=4 task.sequence_length=3 algo=tpo,grpo"}
"""


def test_a_prefix_stage_lists_every_run_to_its_prefix_before_any_to_its_end(tmp_path):
    js = study.jobs(study.load(_queue(tmp_path, PREFIX_QUEUE)))
    assert [j.until for j in js] == [100, 100, None, None]
    assert [j.overrides for j in js[:2]] == [j.overrides for j in js[2:]]


@pytest.mark.slow
def test_a_prefix_pass_stops_each_run_at_its_prefix_and_the_extension_is_bit_identical(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study, "PREFIX_POLL_S", 0.2)
    repo = tmp_path / "repo"
    repo.mkdir()
    q = _queue(tmp_path, PREFIX_QUEUE)
    assert study.main(["run", "--queue", str(q), "--repo", str(repo), "--jobs", "1", "--any-code",
                       "--max-runs", "2"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert out.count("to episode 100") == 2 and "at episode" in out
    runs = sorted(repo.rglob("summary.json"))
    assert len(runs) == 2
    for p in runs:
        assert json.loads(p.read_text())["status"] != "completed"
        assert 100 <= study.next_step(p.parent) < 200
    rows = study.survey(study.jobs(study.load(q)), repo.resolve())
    assert [st for _, _, st in rows] == ["completed", "completed", "started", "started"]
    # the extension: both to their end, then the same curve as one uninterrupted run
    assert study.main(["run", "--queue", str(q), "--repo", str(repo), "--jobs", "1", "--any-code"]) == 0
    whole = tmp_path / "whole"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}  # the queue's kernels
    subprocess.run([sys.executable, "-m", "bench", "task=demo", "task.episodes=200", "task.batch_size=4",
                    "task.sequence_length=3", "algo=tpo", "seed=0", *study.COMMON, f"output_root={whole}"],
                   check=True, capture_output=True, cwd=tmp_path, env=env)
    import pandas as pd
    resumed = pd.read_parquet(next(p for p in repo.rglob("metrics.parquet") if "/tpo/" in str(p)))
    straight = pd.read_parquet(next(whole.rglob("metrics.parquet")))
    cols = [c for c in straight.columns if c not in ("wall_s",)]
    pd.testing.assert_frame_equal(resumed[cols].reset_index(drop=True), straight[cols].reset_index(drop=True))


def _git_repo(repo: Path):
    repo.mkdir(parents=True, exist_ok=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (repo / "algorithms").mkdir(exist_ok=True)
    (repo / "algorithms" / "x.py").write_text("A = 1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    return git


@pytest.mark.slow  # git processes
def test_the_pin_check_refuses_untracked_files_in_the_code_folders(tmp_path):
    """A module dropped into algorithms/ is imported by every run, so the queue's checkout
    must not hold one; an ignored file (a byte-code cache) does not count."""
    repo = tmp_path / "g"
    git = _git_repo(repo)
    (repo / ".gitignore").write_text("__pycache__/\n")
    git("add", ".gitignore")
    git("commit", "-qm", "ignore")
    code = git("rev-parse", "HEAD").stdout.strip()
    (repo / "algorithms" / "__pycache__").mkdir()
    (repo / "algorithms" / "__pycache__" / "x.cpython-311.pyc").write_text("")
    (repo / "notes.txt").write_text("outside the code folders")
    assert study.check_code(repo, code) is None
    (repo / "algorithms" / "zz_local.py").write_text("import torch\n")
    why = study.check_code(repo, code)
    assert why is not None and "untracked files (algorithms/zz_local.py" in why and "--repo" in why
    (repo / "algorithms" / "zz_local.py").unlink()
    (repo / "conf" / "algo").mkdir(parents=True)
    (repo / "conf" / "algo" / "mine.yaml").write_text("name: tpo\n")
    assert "conf/algo/mine.yaml" in study.check_code(repo, code)


@pytest.mark.slow  # git processes: the runs committed in this checkout are read
def test_a_queue_without_code_is_refused_unless_any_code(tmp_path, capsys):
    q = _queue(tmp_path)
    assert "code" not in q.read_text()
    assert study.main(["run", "--queue", str(q), "--repo", str(tmp_path), "--dry-run"]) == 0  # lists only
    capsys.readouterr()
    assert study.main(["run", "--queue", str(q), "--repo", str(tmp_path), "--max-runs", "1"]) == 2
    err = capsys.readouterr().err
    assert "no `code:`" in err and "--any-code" in err


@pytest.mark.parametrize("text,says", [
    ("stages: [\n  - name: a\n   why: x", "not valid YAML at line"),
    ("- just\n- a list\n", "holds a list, not a mapping"),
    ("stages:\n  - {name: a, why: b, sweeps: [{root: r, cost_s: 1, args: 'algo=tpo'}]}\n",
     "each sweep needs 'seeds'"),
    ("stages:\n  - {name: a, why: b, sweeps: [{root: r, seeds: [0, x], cost_s: 1, args: 'algo=tpo'}]}\n",
     "is not [start, stop]"),
])
def test_a_damaged_queue_is_named_not_a_traceback(tmp_path, capsys, text, says):
    q = _queue(tmp_path, text)
    assert study.main(["status", "--queue", str(q), "--repo", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and str(q) in err and "Traceback" not in err


def _one_run_queue(tmp_path) -> Path:
    return _queue(tmp_path, """
stages:
  - name: a
    why: one run
    sweeps:
      - {root: runs/m, seeds: [0, 1], cost_s: 10, args: "task=demo task.episodes=2 task.batch_size=4 task.sequence_length=3 algo=tpo"}
""")


@pytest.mark.slow  # trains
def test_a_failed_commit_fails_the_run_and_status_says_it_is_not_committed(tmp_path, capsys, monkeypatch):
    """A stale index.lock: the run trains, its commit fails every try, so the queue exits 1
    and `status` counts it completed but not committed; the lock gone, the same command
    commits it and the note goes."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the runs train with this checkout's code
    monkeypatch.setattr(study, "COMMIT_PAUSE_S", 0.0)
    repo = tmp_path / "g"
    _git_repo(repo)
    q = _one_run_queue(tmp_path)
    (repo / ".git" / "index.lock").write_text("")
    argv = ["--queue", str(q), "--repo", str(repo)]
    assert study.main(["run", *argv, "--commit", "--any-code"]) == 1
    out = capsys.readouterr()
    assert "could not commit" in out.err and "done: 0 ran, 1 failed" in out.out
    assert study.main(["status", *argv]) == 0
    assert "1/1    completed (1 not committed)" in capsys.readouterr().out
    (repo / ".git" / "index.lock").unlink()  # the same command again commits it
    assert study.main(["run", *argv, "--commit", "--any-code"]) == 0
    assert "1 completed run(s) not committed: committing them" in capsys.readouterr().out
    assert study.main(["status", *argv]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "1/1    completed," in line and "not committed" not in line


@pytest.mark.slow  # trains
def test_a_run_another_queue_holds_is_left_to_it_not_failed(tmp_path, capsys, monkeypatch):
    """Two queues at once: a run the other one trains (its lock held by another process)
    is skipped as held, and the queue exits 0."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    q = _one_run_queue(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (job,) = study.jobs(study.load(q))
    lock = study.locate(job, repo) / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from tpo_bench.bench import rundir\n"
                               f"fd, _ = rundir.hold(__import__('pathlib').Path({str(lock)!r}))\n"
                               "print('held', flush=True)\ntime.sleep(600)\n"],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert study.main(["run", "--queue", str(q), "--repo", str(repo), "--any-code"]) == 0
        out = capsys.readouterr().out
        assert "0 ran, 0 failed, 1 held by another process" in out
    finally:
        holder.kill()
        holder.wait()
    assert study.main(["run", "--queue", str(q), "--repo", str(repo), "--any-code"]) == 0
    assert "1 ran, 0 failed" in capsys.readouterr().out


@pytest.mark.slow  # git processes
def test_runs_committed_in_main_count_as_completed_in_the_queues_worktree(tmp_path, capsys, monkeypatch):
    """A worktree at the queue's commit lacks the runs completed and merged into main since:
    `status` counts them completed, `run` skips them; a run main holds but has not
    committed, or holds in progress, still trains."""
    source = tmp_path / "main"
    git = _git_repo(source)
    code = git("rev-parse", "HEAD").stdout.strip()
    q = _queue(tmp_path, f"""
code: {code}
stages:
  - name: a
    why: two runs
    sweeps:
      - {{root: reproduction/runs/m, seeds: [0, 2], cost_s: 10, args: "task=demo task.episodes=2 task.batch_size=4 task.sequence_length=3 algo=tpo"}}
""")
    first, second = study.jobs(study.load(q))
    for job, status in ((first, "completed"), (second, "running")):
        d = study.locate(job, source)
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": status}))
    git("add", ".")
    git("commit", "-qm", "seed 0 completed and seed 1 in progress, merged into main")
    wt = tmp_path / "study"
    argv = ["--queue", str(q), "--source", str(source), "--repo", str(wt)]
    assert study.main(["worktree", *argv]) == 0
    assert f"branch {study.STUDY_BRANCH} at {code[:12]}" in capsys.readouterr().out
    assert study.main(["status", *argv]) == 0
    assert "1/2    completed, 0 started, 1 left" in capsys.readouterr().out
    assert study.main(["list", *argv]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("completed") and f"(in {source})" in listed[0] and "seed=0" in listed[0]
    assert listed[1].startswith("todo") and "seed=1" in listed[1]
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the runs train with this checkout's code
    assert study.main(["run", *argv, "--commit", "--any-code"]) == 0
    out = capsys.readouterr().out
    assert "1 run to go" in out and "seed=1" in out and "seed=0" not in out
    assert not study.locate(first, wt).exists()  # seed 0 was never trained here
    assert study.main(["status", *argv]) == 0
    assert "2/2    completed, 0 started, 0 left" in capsys.readouterr().out
    git("rm", "-q", "--cached", str(study.locate(first, source).relative_to(source) / "summary.json"))
    assert study.main(["status", *argv]) == 0  # completed there, but not committed: trains here
    assert "1/2    completed" in capsys.readouterr().out
    assert study.main(["status", "--queue", str(q), "--repo", str(wt), "--source", str(wt)]) == 0
    assert "1/2    completed" in capsys.readouterr().out


@pytest.mark.slow  # git processes
def test_worktree_makes_the_queues_checkout_reuses_its_branch_and_refuses_another_commit(tmp_path, capsys):
    source = tmp_path / "main"
    git = _git_repo(source)
    code = git("rev-parse", "HEAD").stdout.strip()
    q = _queue(tmp_path, f"code: {code}\nstages: []\n")
    wt = tmp_path / "study"
    argv = ["--queue", str(q), "--source", str(source)]
    assert study.main(["worktree", *argv, "--repo", str(wt)]) == 0
    wgit = lambda *a: subprocess.run(["git", "-C", str(wt), *a], check=True, capture_output=True, text=True)
    assert wgit("rev-parse", "--abbrev-ref", "HEAD").stdout.strip() == study.STUDY_BRANCH
    run = wt / study.RUNS_PREFIX / "t" / "seed=0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    wgit("add", ".")
    wgit("commit", "-qm", "a run not merged yet")
    kept = wgit("rev-parse", "HEAD").stdout.strip()
    git("worktree", "remove", "--force", str(wt))  # a new session: the folder is gone, the branch is not
    capsys.readouterr()
    assert study.main(["worktree", *argv, "--repo", str(wt)]) == 0
    assert wgit("rev-parse", "HEAD").stdout.strip() == kept  # reused as it was, not reset to the code
    assert study.main(["worktree", *argv, "--repo", str(wt)]) == 0  # the existing checkout: accepted
    capsys.readouterr()
    (source / "algorithms" / "x.py").write_text("A = 2\n")
    git("commit", "-qam", "other code")
    q.write_text(f"code: {git('rev-parse', 'HEAD').stdout.strip()}\nstages: []\n")
    assert study.main(["worktree", *argv, "--repo", str(wt)]) == 2
    err = capsys.readouterr().err
    assert "the queue's runs train at" in err and f"git branch -m {study.STUDY_BRANCH}" in err
    assert study.main(["worktree", *argv, "--repo", str(wt / "reproduction")]) == 2
    assert "not the top of a git checkout" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    assert study.main(["worktree", "--queue", str(q), "--source", str(tmp_path / "plain"),
                       "--repo", str(tmp_path / "new")]) == 2
    assert "--source" in capsys.readouterr().err and not (tmp_path / "new").exists()


def _seeds(token: str) -> range:
    """`'seed=range(a,b)'` of a command line, as the seeds Hydra sweeps."""
    value = token.partition("=")[2].strip("'")
    assert value.startswith("range(") and value.endswith(")"), token
    return range(*map(int, value[len("range("):-1].split(",")))


def test_every_committed_terminal_run_is_made_by_a_documented_command():
    """Each run folder under reproduction/runs/terminal comes from a `python -m bench` line of
    reproduction/README.md or a sweep of the study queue: its config hash is the one that
    line composes, and its seed is in that line's seeds."""
    import itertools
    import re

    root = "reproduction/runs/terminal"
    queue, readme = {}, {}  # overrides (seed aside) -> seeds
    for job in study.jobs(study.load(REPO / "reproduction" / "study.yaml")):
        if job.root == root:
            queue.setdefault(job.overrides[1:], set()).add(int(job.overrides[0].split("=", 1)[1]))
    text = (REPO / "reproduction" / "README.md").read_text()
    commands = re.findall(rf"^python -m bench -m (.*) \$common output_root={root}$", text, re.M)
    assert commands, "reproduction/README.md names no command for " + root
    for command in commands:
        tokens = command.split()
        [seed] = [t for t in tokens if t.strip("'").startswith("seed=")]
        axes = [[f"{k}={x}" for x in v.split(",")] for k, _, v in (t.partition("=") for t in tokens if t != seed)]
        for combo in itertools.product(*axes):
            readme.setdefault(combo, set()).update(_seeds(seed))
    folders = {(d.parents[1].name, d.parent.name) for d in (REPO / root).glob("*/*/*")}  # (task, algo)
    named = lambda rest, key: next((o.split("=", 1)[1] for o in rest if o.startswith(key + "=")), None)  # noqa: E731

    def made(lines: dict, every: bool) -> set:
        """(config hash, seed) of every run the lines make; `every=False` composes only the
        lines a committed folder can come from."""
        out = set()
        for rest, seeds in lines.items():
            if not every and None not in (named(rest, "task"), named(rest, "algo")) and \
                    (named(rest, "task"), named(rest, "algo")) not in folders:
                continue
            config_hash = study.identity(REPO / root, rest)[2]
            out.update((config_hash, s) for s in seeds)
        return out

    by_queue, by_readme = made(queue, every=False), made(readme, every=True)
    committed = {(d.parent.name, int(d.name.split("=", 1)[1]))
                 for d in (REPO / root).glob("*/*/*/seed=*")}
    assert committed, f"no run folders under {root}"
    missing = committed - by_queue - by_readme
    assert not missing, f"no documented command makes: {sorted(missing)}"
    # the README's commands name runs that are committed, and none the queue runs too
    assert by_readme <= committed, sorted(by_readme - committed)
    assert not by_readme & by_queue, sorted(by_readme & by_queue)
