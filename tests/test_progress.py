"""Progress lines: a run's line by time as well as by episode count,
the sweep's overall line, and collect's count over many run directories."""
import io as stdio
import json
import math
import re
import time
from pathlib import Path

import pytest

from conftest import bench_here, compose, run_bench, run_dirs, run_script

# What a person follows in a terminal or a SLURM log: one plain line per report.
RUN_LINE = re.compile(
    r"^\[(?P<label>[\w.+-]+/[\w.+-]+ [0-9a-f]{10} seed=\d+)\] step (?P<done>\d+)/(?P<total>\d+) "
    r"error (?P<error>\d\.\d{4})(?: (?:test|eval) error (?P<test>\d\.\d{4}))? "
    r"reward -?\d+\.\d{4} loss -?\d+\.\d{4} \| (?P<rate>\d+\.\d\d) ep/s \| "
    r"ETA (?P<eta>\d+h\d\dm|\d+m\d\ds)$")
SWEEP_LINE = re.compile(
    r"\[sweep\] (?P<done>\d+)/(?P<total>\d+) runs done \((?P<completed>\d+) completed, "
    r"(?P<skipped>\d+) already complete\), (?P<running>\d+) running, (?P<failed>\d+) failed"
    r"(?:, (?P<interrupted>\d+) interrupted)?(?:, (?P<unreadable>\d+) unreadable)?, "
    r"(?P<waiting>\d+) waiting; (?:ETA (?P<eta>—|\d+h\d\dm|\d+m\d\ds)|took (?P<took>\d+h\d\dm|\d+m\d\ds))$")
SMALL = ["task=demo", "task.batch_size=4", "task.sequence_length=3", "threads=1"]


def eta_seconds(text: str) -> int:
    h = re.fullmatch(r"(\d+)h(\d\d)m", text)
    if h:
        return int(h[1]) * 3600 + int(h[2]) * 60
    m = re.fullmatch(r"(\d+)m(\d\d)s", text)
    return int(m[1]) * 60 + int(m[2])


def plain(text: str) -> None:
    assert "\r" not in text and "\x1b" not in text  # no carriage returns, no ANSI codes


# ---------------------------------------------------------------- a run's line

@pytest.mark.slow
def test_run_line_every_episode_by_time_then_only_the_last(out):
    """progress_every_s=0 gives a line per episode even with the count trigger off; a long
    interval with log_every=0 leaves only the last episode's line. The second run lands in
    the first one's directory: progress_every_s is not part of the config's identity."""
    proc = run_bench(*SMALL, "task.episodes=6", "log_every=0", "progress_every_s=0",
                     f"output_root={out}")
    plain(proc.stdout)
    lines = [m for m in map(RUN_LINE.match, proc.stdout.splitlines()) if m]
    assert [int(m["done"]) for m in lines] == [1, 2, 3, 4, 5, 6]
    assert all(int(m["total"]) == 6 and float(m["rate"]) > 0 for m in lines)
    assert all(0 <= float(m["error"]) <= 1 and m["test"] is None for m in lines)
    assert lines[-1]["eta"] == "0m00s"
    # the ETA is what is left at the attempt's rate (loose: rounding to 2 decimals and whole s)
    for m in lines:
        left = (6 - int(m["done"])) / float(m["rate"])
        assert abs(eta_seconds(m["eta"]) - left) <= 1.5
    [d] = run_dirs(out)
    assert json.loads((d / "summary.json").read_text())["status"] == "completed"

    again = run_bench(*SMALL, "task.episodes=6", "log_every=0", "progress_every_s=1000",
                      "force=true", f"output_root={out}")
    assert [int(m["done"]) for m in map(RUN_LINE.match, again.stdout.splitlines()) if m] == [6]
    assert run_dirs(out) == [d]


def test_run_line_format_rate_and_eta(capsys):
    from tpo_bench.bench.runner import progress_line

    row = {"error": 0.25, "reward_mean": 0.75, "loss": -0.5}
    # resumed at 10, 20 episodes in 10 s: 2 ep/s over this attempt, 70 left -> 35 s
    progress_line("demo/tpo 0123456789 seed=3", 30, 100, row, row, False, 10.0, 10)
    # an evaluating task shows its last evaluation: held-out test error where it has one
    progress_line("mnist/tpo 0123456789 seed=0", 10, 10_010, row, {**row, "test_error": 0.125},
              True, 10.0, 0)
    progress_line("tabular_single/pg 0123456789 seed=0", 5, 10, row, {**row, "error": 0.5}, True, 5.0, 0)
    printed = capsys.readouterr().out
    plain(printed)
    first, second, third = [RUN_LINE.match(line) for line in printed.splitlines()]
    assert first["label"] == "demo/tpo 0123456789 seed=3" and first["rate"] == "2.00"
    assert first["eta"] == "0m35s" and first["test"] is None
    assert second["test"] == "0.1250" and second["eta"] == "2h46m"  # 10 000 s at 1 ep/s
    assert "eval error 0.5000" in third.group(0)
    assert printed.count("\n") == 3


def test_progress_every_s_is_not_identity_and_is_validated():
    from tpo_bench.bench.build import ConfigError, build

    cfg = compose(*SMALL)
    assert cfg["progress_every_s"] == 30
    a, b = build({**cfg, "progress_every_s": 0.5}), build({**cfg, "progress_every_s": 120})
    legacy = build({k: v for k, v in cfg.items() if k != "progress_every_s"})
    assert a.run_dir == b.run_dir == legacy.run_dir  # hashes from before the key are kept
    assert (a.run.progress_every_s, b.run.progress_every_s) == (0.5, 120.0)
    assert build({**cfg, "log_every": 0}).run.log_every == 0  # log_every=0: by time only
    for bad in (-1, -0.5, "often", True, math.nan, math.inf, None):
        with pytest.raises(ConfigError, match=r"progress_every_s must be a non-negative number"):
            build({**cfg, "progress_every_s": bad})
    with pytest.raises(ConfigError, match=r"log_every must be a non-negative integer"):
        build({**cfg, "log_every": -1})


def test_bad_progress_every_s_exits_2_naming_the_key(tmp_path):
    """`python -m bench`'s entry in this process (bench_here)."""
    proc = bench_here(*SMALL, "progress_every_s=-3", f"output_root={tmp_path / 'out'}")
    assert proc.returncode == 2
    assert "progress_every_s must be a non-negative number" in proc.stderr and "-3" in proc.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the sweep's line

def _summary(path: Path, **fields) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "summary.json").write_text(json.dumps(fields))


def test_sweep_counts_classify_by_what_changed_since_the_start(tmp_path):
    from hydra_plugins.bench_sweeper import _progress as P

    now = time.time()
    d = {name: tmp_path / name for name in
         ("missing", "old_done", "old_failed", "new_done", "new_failed", "running", "stale",
          "interrupted", "damaged", "empty")}
    _summary(d["old_done"], status="completed", finished_at=now - 900, heartbeat=now - 900)
    _summary(d["old_failed"], status="failed", finished_at=now - 900)
    _summary(d["new_done"], status="running", heartbeat=now - 100)
    _summary(d["running"], status="running", heartbeat=now - 500)
    d["damaged"].mkdir()
    (d["damaged"] / "summary.json").write_text('{"status": "compl')
    before = {p: P.fingerprint(P.read_summary(p)) for p in d.values()}
    assert before[d["damaged"]] == ("unreadable",) and before[d["missing"]] == (None,)
    # ... then the sweep runs:
    _summary(d["new_done"], status="completed", heartbeat=now - 20, finished_at=now - 20,
             attempts_log=[{"started_at": now - 900}, {"started_at": now - 120}])
    _summary(d["new_failed"], status="failed", finished_at=now - 5)
    _summary(d["running"], status="running", heartbeat=now - 1,
             attempts_log=[{"started_at": now - 30}])
    _summary(d["interrupted"], status="interrupted", finished_at=now - 2)
    _summary(d["stale"], status="running", heartbeat=now - 5000)  # its process died
    (d["empty"] / "summary.json").parent.mkdir()
    (d["empty"] / "summary.json").write_text("")

    c = P.count(list(d.values()), before, force=False, now=now)
    assert (c.completed, c.skipped, c.running, c.failed, c.interrupted, c.unreadable) == (1, 1, 1, 1, 1, 2)
    assert c.done == 2 and c.to_do == 10 - 2 - 1
    assert c.durations == [pytest.approx(100.0)]  # this attempt only, not the run's first start
    assert c.running_for == [pytest.approx(30.0)]
    assert c.busy_s == pytest.approx(130.0) and c.span_s == pytest.approx(120.0)
    # force=true: a run completed before the sweep is to be run again, not done
    forced = P.count(list(d.values()), before, force=True, now=now)
    assert (forced.completed, forced.skipped) == (1, 0)
    # the unreadable are refused by the runner, not work to come: 4 waiting * 100 s + 70 s
    # left of the running one = 470 s, over 130 busy s in 120 s = 1.083 at once: 434 s
    assert P.line(c, 10.0) == ("[sweep] 2/10 runs done (1 completed, 1 already complete), 1 running, "
                               "1 failed, 1 interrupted, 2 unreadable, 3 waiting; ETA 7m13s")
    assert SWEEP_LINE.fullmatch(P.line(c, 10.0, final=True))["took"] == "0m10s"
    # runs the jobs returned untouched (refused: a damaged checkpoint; held by another
    # process) are named at the end, not counted as waiting
    c.not_run = {"refused": 1, "held": 2}
    assert P.line(c, 10.0, final=True) == (
        "[sweep] 2/10 runs done (1 completed, 1 already complete), 1 running, 1 failed, "
        "1 interrupted, 2 unreadable, 2 held, 1 refused, 0 waiting; took 0m10s")


def test_sweep_eta():
    from hydra_plugins.bench_sweeper._progress import Counts, eta_s, line

    assert eta_s(Counts(total=5)) is None  # no run finished yet
    assert line(Counts(total=5), 60.0).endswith("5 waiting; ETA —")
    # mean 15 s; 3 waiting -> 45 s; the running one has 10 s left -> 55 s of work
    one = dict(total=6, completed=2, running=1, durations=[10.0, 20.0], running_for=[5.0], busy_s=35.0)
    assert eta_s(Counts(**one, span_s=35.0)) == pytest.approx(55.0)  # one at a time
    assert eta_s(Counts(**one, span_s=17.5)) == pytest.approx(27.5)  # two at once on average
    assert line(Counts(**one, span_s=17.5), 1.0).endswith("3 waiting; ETA 0m27s")
    # 2 waiting * 15 + 10 + 10 = 50 s of work; 2 run now, more than the average so far
    two_now = Counts(total=6, completed=2, running=2, durations=[10.0, 20.0], running_for=[5.0, 5.0],
                     busy_s=40.0, span_s=1000.0)
    assert eta_s(two_now) == pytest.approx(25.0)
    # and at the tail the work is not shared by more runs than are left
    tail = Counts(total=3, completed=2, running=1, durations=[10.0, 10.0], running_for=[4.0],
                  busy_s=24.0, span_s=5.0)
    assert eta_s(tail) == pytest.approx(6.0)
    assert eta_s(Counts(total=2, completed=2, durations=[1.0, 1.0], busy_s=2.0, span_s=2.0)) == 0.0


@pytest.mark.slow
def test_sweep_line_in_a_multirun(tmp_path):
    """A real (basic launcher) sweep: 2 jobs x 2 packed seeds; one run completed before
    the sweep, the 4-episode runs fail at step 3 (their NaN is injected)."""
    root = tmp_path / "out"
    common = [*SMALL, "log_every=0", "progress_every_s=0.2", f"output_root={root}"]
    run_bench(*common, "task.episodes=3", "seed=0")
    proc = run_bench("-m", *common, "task.episodes=3,4", "seed=0", "seeds_per_job=2",
                     "debug.nan_at=3", "debug.sleep=0.3", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # failures -> the sweep exits 1
    plain(proc.stdout)
    found = [SWEEP_LINE.search(line) for line in proc.stdout.splitlines() if "runs done" in line]
    assert found and all(found), proc.stdout
    *during, final = found
    assert final["took"] and not final["eta"]
    assert {k: int(final[k]) for k in ("done", "total", "completed", "skipped", "running",
                                       "failed", "waiting")} == dict(
        done=2, total=4, completed=1, skipped=1, running=0, failed=2, waiting=0)
    assert during, "no line while the sweep ran"
    dones = [int(m["done"]) for m in found]
    assert dones == sorted(dones)
    for m in during:
        assert int(m["skipped"]) == 1  # known as skipped from the start
        if int(m["completed"]) == 0:
            assert m["eta"] == "—"
        elif int(m["waiting"]) + int(m["running"]):
            assert m["eta"] != "—"
    assert "[sweep] 2 jobs, 4 runs: 2 completed, 2 failed" in proc.stdout


# ---------------------------------------------------------------- collect's count

@pytest.mark.slow
def test_collect_progress_on_stderr_only_when_asked_or_slow(tmp_path):
    root = tmp_path / "out"
    from dev.bench_collect import demo_config, write_run

    for seed in range(3):
        write_run(root, demo_config(2), seed, [0.5, 0.4])
    write_run(root, demo_config(2), 3, [0.5, 0.4], status="failed")
    quiet = run_script("analysis/collect.py", str(root), "--out", str(tmp_path / "a.parquet"),
                       "--allow-skips")
    assert "collect:" not in quiet.stderr + quiet.stdout  # a small, fast root: no noise
    shown = run_script("analysis/collect.py", str(root), "--out", str(tmp_path / "b.parquet"),
                       "--allow-skips", "--progress")
    plain(shown.stderr)
    assert re.search(r"^collect: 4/4 summaries read \(\d+ s\)$", shown.stderr, re.M)
    assert re.search(r"^collect: 4/4 run directories read \(\d+ s\)$", shown.stderr, re.M)
    assert "collect:" not in shown.stdout and shown.stdout == quiet.stdout.replace("a.parquet", "b.parquet")


def test_collect_progress_lines_are_rate_limited():
    from tpo_bench.analysis.collect import PROGRESS_MANY, Progress

    t = [0.0]

    def tracked(n, step_s, **kw):
        out = stdio.StringIO()
        p = Progress("run directories read", stream=out, clock=lambda: t[0], started=0.0, **kw)
        t[0] = 0.0
        for _ in p.track(list(range(n))):
            t[0] += step_s
        return out.getvalue().splitlines()

    assert tracked(12, 1.0) == ["collect: 5/12 run directories read (5 s)",
                                "collect: 10/12 run directories read (10 s)",
                                "collect: 12/12 run directories read (12 s)"]
    assert tracked(10, 0.01) == []  # fast and few: silent
    assert tracked(10, 0.01, forced=True) == ["collect: 10/10 run directories read (0 s)"]
    assert tracked(3, 0.9) == ["collect: 3/3 run directories read (3 s)"]  # past 2 s: the count
    assert tracked(PROGRESS_MANY, 0.0) == [f"collect: {PROGRESS_MANY}/{PROGRESS_MANY} run directories read (0 s)"]
