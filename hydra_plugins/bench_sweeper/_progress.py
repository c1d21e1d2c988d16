"""The sweep's progress line, read from the runs' summary.json files alone, so it works
the same under every launcher (in-process, joblib workers, SLURM jobs on other nodes).
(Named with a leading _ so that Hydra's plugin scan does not import it on every run.)

    [sweep] 12/60 runs done (10 completed, 2 already complete), 2 running, 1 failed, 45 waiting; ETA 1h20m
    [sweep] 59/60 runs done (57 completed, 2 already complete), 0 running, 1 failed, 0 waiting; took 3h02m
"""
from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpo_bench.contract import schema

# With nothing changing, the line is still repeated this many intervals apart: a SLURM
# sweep waiting in the queue for an hour should show that it is alive.
REPEAT_AFTER = 10
MIN_POLL_S = 0.5  # progress_every_s=0 (a line per episode for a run) must not spin here


@dataclass
class Counts:
    total: int
    completed: int = 0  # finished during this sweep
    skipped: int = 0  # completed before it (the job skips them)
    running: int = 0
    failed: int = 0
    interrupted: int = 0
    unreadable: int = 0
    durations: list = field(default_factory=list)  # s, this sweep's attempt of each finished run
    running_for: list = field(default_factory=list)  # s, the current attempt of each running run
    busy_s: float = 0.0  # s spent in runs by this sweep's attempts (failed ones too)
    span_s: float = 0.0  # s since the first of them started

    @property
    def done(self) -> int:
        return self.completed + self.skipped

    @property
    def to_do(self) -> int:  # everything not done and not failed, running included
        return self.total - self.done - self.failed

    def key(self) -> tuple:
        return (self.completed, self.skipped, self.running, self.failed, self.interrupted,
                self.unreadable)

    not_run: dict = field(default_factory=dict)  # status -> n: runs the jobs left untouched


def read_summary(path: Path):
    """A summary as a dict, None where there is none yet, "unreadable" where it is damaged."""
    from tpo_bench.contract import io

    try:
        return io.read_json_object(path / schema.SUMMARY)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, io.DamagedFile):
        return "unreadable"


def _attempt_start(summary: dict) -> float | None:
    log = summary.get("attempts_log")
    start = log[-1].get("started_at") if isinstance(log, list) and log and isinstance(log[-1], dict) \
        else summary.get("started_at")
    return float(start) if isinstance(start, (int, float)) and not isinstance(start, bool) else None


def fingerprint(summary) -> tuple:
    """What changes whenever a process touches the run (a heartbeat, a verdict)."""
    if not isinstance(summary, dict):
        return (summary,)
    return (summary.get("status"), summary.get("heartbeat"), summary.get("finished_at"))


def count(run_dirs: list[Path], before: dict, force: bool, now: float, untouched=()) -> Counts:
    """Classify every run against `before` (its fingerprint when the sweep started): a
    summary unchanged since then was not touched by this sweep. Comparing fingerprints
    instead of timestamps keeps the counts right when the jobs' clocks (other nodes) are
    not the submitting host's. `untouched`: runs the jobs returned as held or refused
    (counted in not_run), never as already complete."""
    c = Counts(total=len(run_dirs))
    untouched = set(map(Path, untouched))
    starts = []
    for path in run_dirs:
        summary = read_summary(path)
        if summary == "unreadable":
            c.unreadable += 1
            continue
        if summary is None:
            continue
        status = summary.get("status")
        if fingerprint(summary) == before.get(path):
            if status == "completed" and not force and path not in untouched:
                c.skipped += 1
            continue  # waiting: left from an earlier sweep, to be (re-)run
        start, end = _attempt_start(summary), summary.get("finished_at")
        took = end - start if start is not None and isinstance(end, (int, float)) \
            and not isinstance(end, bool) and end >= start else None
        if status == "completed":
            c.completed += 1
            if took is not None:
                c.durations.append(took)
        elif status == "failed":
            c.failed += 1
        elif status == "interrupted":  # requeued on SLURM, or the sweep itself was stopped
            c.interrupted += 1
        elif status == "running":
            beat = summary.get("heartbeat")
            if isinstance(beat, (int, float)) and now - beat > schema.STALE_AFTER_S:
                continue  # its process is gone; waiting for a requeue or the next sweep
            c.running += 1
            if start is not None:
                took = max(now - start, 0.0)
                c.running_for.append(took)
        else:
            c.unreadable += 1
            continue
        if took is not None:
            c.busy_s += took
            starts.append(start)
    c.span_s = max(now - min(starts), 0.0) if starts else 0.0
    return c


def eta_s(c: Counts) -> float | None:
    """Seconds until every run is done, or None before any run finished in this sweep.
    The work left is the mean duration of this sweep's finished runs for each waiting run
    and what the mean leaves of each running one; it is shared among the runs observed at
    once: the average number busy since the first of them started (the gaps between jobs
    and queue waits after it included; the sweep's own start-up and a first queue wait
    not), or as many as run now if more, and never more than there are runs left."""
    if not c.durations:
        return None
    left = c.to_do - c.unreadable  # the runner refuses a damaged summary: no work to come
    if left <= 0:
        return 0.0
    mean = sum(c.durations) / len(c.durations)
    waiting = max(left - len(c.running_for), 0)
    work = mean * waiting + sum(max(mean - t, 0.0) for t in c.running_for)
    at_once = max(c.busy_s / c.span_s if c.span_s > 0 else 1.0, c.running)
    return work / max(min(at_once, left), 1e-9)


def line(c: Counts, wall_s: float, final: bool = False) -> str:
    """The final line (the launcher has returned: nothing left will run now) says how long
    the sweep took instead of an ETA."""
    from tpo_bench.bench.runner import fmt_duration  # the format of the runs' own ETA

    untouched = sorted(c.not_run.items())
    extra = "".join(f", {n} {what}" for n, what in ((c.interrupted, "interrupted"),
                                                    (c.unreadable, "unreadable"),
                                                    *((n, s) for s, n in untouched)) if n)
    eta = eta_s(c)
    waiting = c.to_do - c.running - c.interrupted - c.unreadable - sum(c.not_run.values())
    when = f"took {fmt_duration(wall_s)}" if final else f"ETA {'—' if eta is None else fmt_duration(eta)}"
    return (f"[sweep] {c.done}/{c.total} runs done ({c.completed} completed, {c.skipped} already "
            f"complete), {c.running} running, {c.failed} failed{extra}, {waiting} waiting; {when}")


def every_s(config) -> float:
    """progress_every_s from the sweep's config; the runner has refused bad values already
    when it is a job's own, so anything odd here is a value swept per job: the default."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(config, "progress_every_s", default=30)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0
    return float(value) if ok else 30.0


class SweepProgress:
    """`with SweepProgress(dirs, every_s, force): launch()` prints the line from a daemon
    thread while the launcher runs, whenever the counts change (checked every `every_s`),
    and once more at the end."""

    def __init__(self, run_dirs, every_s: float, force: bool, stream=None):
        self.run_dirs = [Path(p) for p in dict.fromkeys(run_dirs)]
        self.every_s, self.force = every_s, force
        self.stream = stream or sys.stdout
        self._stop = threading.Event()
        self._last: tuple | None = None  # the counts last printed, and when
        self._last_at = 0.0

    def _report(self, final: bool = False, not_run: dict | None = None,
                failed: list | None = None, untouched=()) -> None:
        c = count(self.run_dirs, self._before, self.force, time.time(), untouched)
        c.not_run = dict(not_run or {})
        # Failed before their files could say so (a folder this user cannot write).
        for d in map(Path, failed or ()):
            now = read_summary(d)
            c.failed += now != "unreadable" and fingerprint(now) == self._before.get(d)
        now = time.monotonic()
        repeat = now - self._last_at >= REPEAT_AFTER * max(self.every_s, MIN_POLL_S)
        if c.key() != self._last or repeat or final:
            text = line(c, now - self._started, final)
            # One write, so that a run's line printed meanwhile cannot split it.
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last, self._last_at = c.key(), now

    def _loop(self) -> None:
        while not self._stop.wait(max(self.every_s, MIN_POLL_S)):
            try:
                self._report()
            except Exception as e:  # the progress line must never stop a sweep
                print(f"[sweep] no more progress lines ({type(e).__name__}: {e})",
                      file=sys.stderr, flush=True)
                return

    def __enter__(self):
        self._before = {p: fingerprint(read_summary(p)) for p in self.run_dirs}
        self._started = self._last_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="sweep-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is not None:  # the launcher failed: say where the runs stand anyway
            self.finish()
        return None

    def finish(self, not_run: dict | None = None, failed: list | None = None, untouched=()) -> None:
        """The last line, once the launcher has returned. `not_run` (status -> n) counts the
        runs the jobs returned untouched (held by another process, refused), `untouched`
        their folders (a refused completed run is not also "already complete"), `failed`
        the folders of runs the jobs returned as failed: a failed run whose files did not
        change could not write them, and the count alone would call it waiting."""
        try:
            self._report(final=True, not_run=not_run, failed=failed, untouched=untouched)
        except Exception:
            pass  # a failed final read must not replace the launcher's own outcome
