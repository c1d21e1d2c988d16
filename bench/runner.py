"""One run, or a job's seeds trained together: claim, open, start, train, close. The job
loop (`run_seeds`) takes each seed's seat through its duties and its episodes through
bench.engine.train_episodes; a single run is the job at S = 1.

    run(spec)        one (config, seed): run_seeds([spec])
    run_seeds(specs) a job's seeds (batch_seeds=true), trained as one batch
    claim_run        the run directory's lock, or the answer for a run not to train
    open_seat        the checkpoint read and checked, config.json and a `running` summary
    start_seat       the seat's policy, optimizer and streams, fresh or resumed
    record_step      an episode's row into the record: progress line, checkpoint when due
    close_seat       the metrics table and the verdict
A seed that fails fails alone; a stop request is read once per step, so every seed
checkpoints at that boundary or none.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from . import checkpoint, debug, fingerprint, interrupts, rundir, tracking
from .build import RunSpec
from ..cli import spelled
from .engine import train_episodes
from ..contract.identity import flatten
from .optim import build_optimizer
from ..contract import io, schema
from ..contract.rng import Streams


def fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


def progress_line(label: str, done: int, episodes: int, row: dict, last: dict, evaluates: bool,
              elapsed: float, resumed_at: int) -> None:
    """One plain line, the same in a terminal and in a SLURM log (no \\r, no colours). The
    rate counts this attempt's episodes only: a resumed run's earlier episodes took no time
    here, and counting them would make the ETA far too short."""
    rate = (done - resumed_at) / max(elapsed, 1e-9)
    test = ""
    if evaluates:  # the last evaluation: held-out test error, else the task's evaluated error
        test = f" test error {last['test_error']:.4f}" if "test_error" in last else \
            f" eval error {last['error']:.4f}"
    line = (f"[{label}] step {done}/{episodes} error {row['error']:.4f}{test} "
            f"reward {row['reward_mean']:.4f} loss {row['loss']:.4f} | "
            f"{rate:.2f} ep/s | ETA {fmt_duration((episodes - done) / max(rate, 1e-9))}\n")
    # One write: a sweep's progress thread prints into the same stream (basic launcher), and
    # print()'s separate write of the newline would let its line land inside this one.
    sys.stdout.write(line)
    sys.stdout.flush()


def _threads(requested: int) -> int:
    """threads=N pins N torch threads; threads=0 takes the cores this process was allotted
    (a SLURM job's CPUs, else its CPU affinity mask) rather than torch's one per core."""
    allotted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = requested or int(os.environ.get("SLURM_CPUS_PER_TASK") or 0) or allotted or 1
    torch.set_num_threads(n)
    return torch.get_num_threads()


def _checkpoint_identity(spec: RunSpec) -> dict[str, Any]:
    return {"config_hash": spec.config_hash, "seed": spec.run.seed, "episodes": spec.task.episodes,
            "torch": str(torch.__version__), "git_commit": io.git_commit()}


def cpu_kernels() -> str:
    """The instruction set torch's CPU kernels dispatch to here (AVX512, AVX2, ...; the
    environment variable ATEN_CPU_CAPABILITY can lower it). Their reductions (softmax,
    sums, norms) round differently from one to another, so metrics are bitwise
    reproducible for one of them only: the same torch on an AVX2 and an AVX512 machine
    gives curves that differ in the last bits (more in a quantity that cancels, like
    misalignment = 1 - cos)."""
    return torch.backends.cpu.get_cpu_capability()


def cpu_model() -> str | None:
    """The CPU an attempt ran on, as /proc/cpuinfo names it ("vendor_id: model name"; None
    where there is no such file). At one kernel instruction set, an Intel and an AMD CPU
    still round matrix products differently: MKL takes code paths of its own on each."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    found = [next((line.split(":", 1)[1].strip() for line in lines if line.startswith(name)), "")
             for name in ("vendor_id", "model name")]
    return ": ".join(f for f in found if f) or None


def _attempt_record(prev: dict, spec: RunSpec, threads: int, identity_: dict,
                    batched: bool) -> dict[str, Any]:
    """summary.json's fields that describe this attempt and every one before it: a run
    resumed under other code, another thread count, other CPU kernels or in a seed batch
    says so."""
    log = [] if spec.run.force else list(prev.get("attempts_log", []))
    log.append({"attempt": len(log) + 1, "started_at": time.time(), "pid": os.getpid(),
                "host": rundir.whoami()["host"], "git_commit": identity_["git_commit"],
                "code_fingerprint": spec.code_fingerprint,
                "threads": threads, "cpu_kernels": cpu_kernels(), "cpu": cpu_model(),
                "batch_seeds": batched,
                "slurm_job_id": os.environ.get("SLURM_JOB_ID")})
    # Runs from before the attempt log: their attempt count and the commit they started under.
    earlier = 0 if spec.run.force else max(prev.get("attempts", 0) - (len(log) - 1), 0)
    legacy = not spec.run.force and "attempts_log" not in prev and prev.get("git_commit")
    commits = (prev.get("git_commits") or [prev["git_commit"]]) if legacy else []
    for a in log:
        if not commits or commits[-1] != a["git_commit"]:
            commits.append(a["git_commit"])
    threads_used = list(dict.fromkeys(
        ([] if spec.run.force or "threads" not in prev else [prev["threads"]]) + [a["threads"] for a in log]))
    return {"attempts": earlier + len(log), "attempts_log": log, "git_commit": identity_["git_commit"],
            "git_commits": commits, "threads": threads, "threads_used": threads_used}


def _not_run(spec: RunSpec, status: str, reason: str) -> dict[str, Any]:
    """A run this process did not touch (held by another, or refused): said on stderr and
    returned to the sweep's report; nothing in the directory changes."""
    print(f"[{status}] {spec.run_dir}: {reason}", file=sys.stderr, flush=True)
    return {"run_dir": str(spec.run_dir), "status": status, "reason": reason}


# ---------------------------------------------------------------- the run

def run(spec: RunSpec) -> dict[str, Any]:
    """Train one (config, seed) into spec.run_dir and return its summary: `run_seeds` for
    one seed. A completed run is skipped (unless spec.run.force); one another process holds
    is left to it; an interrupted one resumes from its checkpoint, if that checkpoint is
    this run's; a failure is recorded (status, reason, partial metrics) and returned, not
    raised."""
    [summary] = run_seeds([spec])
    return summary


def run_seeds(specs: list[RunSpec], compile: bool = False) -> list[dict[str, Any]]:
    """A job's seeds (one for a single run, `run`), trained together; one summary
    per spec, in order. Completed seeds are skipped and seeds another process holds are
    left to it; the rest train as one batch (`compile`: captured epochs, train_episodes).
    A stop signal waits for an episode boundary (or the end)."""
    rds = [rundir.RunDir(s.run_dir, pause_s=s.run.debug.checkpoint_pause) for s in specs]
    answers: dict[int, dict[str, Any]] = {}
    try:
        claimed = []
        for i, (spec, rd) in enumerate(zip(specs, rds)):
            prev, answer = claim_run(spec, rd)
            if answer is None:
                claimed.append((i, spec, rd, prev))
            else:
                answers[i] = answer
        if claimed:
            with interrupts.Boundary() as boundary:
                _attempt(claimed, boundary, answers, compile, len(specs) > 1)
    except interrupts.Interrupted as e:  # each seed as it recorded itself (a sweep reports them)
        e.answers = [answers.get(i) or {"run_dir": str(s.run_dir), "status": schema.INTERRUPTED,
                                        "reason": e.signame} for i, s in enumerate(specs)]
        raise
    finally:
        for rd in rds:
            rd.release()
    return [answers[i] for i in range(len(specs))]


@dataclass
class _Seats:
    """The seats still in a batch (training, or waiting to join it) and the answers of the
    seeds that left it. A seat leaves when it ends: its record is closed and its lock
    released there and then, so that another process may take a failed seed up while the
    batch trains on."""

    live: dict[int, Seat]
    answers: dict[int, dict[str, Any]]

    def end(self, i: int, status: str, reason: str | None = None, kind: str | None = None) -> None:
        seat = self.live.pop(i)
        self.answers[i] = close_seat(seat, status, reason, kind)
        seat.rd.release()


def _attempt(claimed: list, boundary: interrupts.Boundary, answers: dict[int, dict[str, Any]],
             compile: bool = False, batched: bool = False) -> None:
    """One attempt at the claimed seeds, whose locks this process holds: each opened (or
    refused) and closed on its own, trained together; their summaries go into `answers`,
    however the attempt ends (an interrupted seat stays resumable from its checkpoint).
    `batched`: a seed-batched job's (its attempt records say so)."""
    seats = _Seats({}, answers)
    for i, spec, rd, prev in claimed:
        seat = open_seat(spec, rd, prev, batched)
        if isinstance(seat, dict):
            answers[i] = seat
        else:
            seats.live[i] = seat
    verdict: tuple[str, str | None, str | None] = (schema.COMPLETED, None, None)
    try:
        _train(seats, boundary, compile)
    except Exception as e:  # not one seed's (the batched episode, an evaluation): each records it
        verdict = failure(e)
    except BaseException as e:  # interrupted: every seat still open is resumable
        verdict = (schema.INTERRUPTED, getattr(e, "signame", type(e).__name__), None)
        raise
    finally:
        for i in list(seats.live):
            seats.end(i, *verdict)


def _train(seats: _Seats, boundary: interrupts.Boundary, compile: bool = False) -> None:
    """The training loop, over seats in lockstep: each appends to its `rows` (so a failure
    still records them) and fills its `effective` with what the batches really were, and
    checkpoints every spec.run.checkpoint_every episodes and whenever a signal asks
    (interrupts.Boundary), always at an episode boundary. A seat that fails alone leaves
    the batch with its verdict (`_Seats.end`)."""
    for i, seat in list(seats.live.items()):
        try:  # a damaged checkpoint fails its own seed only
            start_seat(seat)
        except Exception as e:
            seats.end(i, *failure(e))
    if not seats.live:
        return
    first = next(iter(seats.live.values())).spec
    task, algo, request = first.task, first.algo, first.request
    for step in range(min(s.start for s in seats.live.values()), task.episodes):
        if not seats.live:  # every seat has ended
            break
        for i, seat in list(seats.live.items()):
            if seat.start > step:  # waiting to join: alive all the same, as its heartbeat says
                try:
                    seat.rd.beat_if_due()
                except Exception as e:
                    seats.end(i, *failure(e))
        active = {i: s for i, s in seats.live.items() if s.start <= step}
        if not active:  # every seat so far has failed; a later-resuming one may still join
            continue
        for seat in active.values():
            if seat.start == step:  # its clock starts when it joins
                seat.t0 = time.perf_counter()
        # An error here is not one seed's: the seeds waiting to join would meet it too.
        rows = train_episodes(task, algo, request, [s.policy for s in active.values()],
                              [s.opt for s in active.values()], [s.streams for s in active.values()],
                              compile)
        checkpointed, asked = False, boundary.pending  # once: every seat checkpoints or none
        for (i, seat), row in zip(active.items(), rows):
            try:
                row = debug.inject(lambda row=row: row, seat.spec.run.debug)(step)
                checkpointed |= record_step(seat, step, row, asked, boundary.why)
            except Exception as e:
                seats.end(i, *failure(e))
        if checkpointed:  # after every seat's checkpoint: a stop then leaves all resumable
            boundary.after_checkpoint()


def claim_run(spec: RunSpec, rd: rundir.RunDir) -> tuple[dict, dict | None]:
    """(the previous summary, None) with the lock taken, or (_, the answer) for a run this
    process must not train: completed, held by another process, unreadable, a symbolic
    link in its path, or a folder this user cannot write (nothing is written then)."""
    try:
        return _claim_lock(spec, rd)
    except io.LinkRefused as e:
        rd.release()
        return {}, _not_run(spec, schema.REFUSED, e.strerror)
    except OSError as e:  # another user's folder, a read-only mount: said, not a traceback
        rd.release()
        where = e.filename or spec.run_dir
        answer = _not_run(spec, schema.FAILED, f"cannot write {where}: {e.strerror}; the run "
                          f"needs a folder this user ({_user()}) can write (check its owner "
                          f"and mode, or choose another output_root)")
        return {}, {**answer, "error_kind": schema.IO_ERROR}


def _user() -> str:
    try:
        import pwd
        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())


def _claim_lock(spec: RunSpec, rd: rundir.RunDir) -> tuple[dict, dict | None]:
    for locked in (False, True):  # again under the lock: another may just have finished
        try:
            prev = rd.previous()
        except io.DamagedFile as e:
            if not spec.run.force:
                rd.release()
                return {}, _not_run(spec, schema.REFUSED, f"{e}; remove it (the run then resumes "
                                    f"from its checkpoint, if any) or force=true restarts the run")
            prev = {}
        if prev and not spec.run.force and (wrong := schema.path_disagreements(rd.path)):
            rd.release()
            return prev, _not_run(spec, schema.REFUSED, f"its files are another run's, not this "
                                  f"path's ({'; '.join(wrong)}): copied or planted here? Move it "
                                  f"away (force=true overwrites it)")
        if prev.get("status") == schema.COMPLETED and not spec.run.force:
            if damage := _table_damage(rd.path / schema.METRICS):
                rd.release()
                return prev, _not_run(spec, schema.REFUSED, f"completed, but its {damage}: the "
                                      f"result is damaged; force=true re-runs it")
            if (answer := _code_changed(spec, prev, locked)) is not False:
                if answer is not None:
                    rd.release()
                    return prev, answer
                if locked:
                    keep_prior(rd.path, prev)
            else:
                rd.release()
                note = "" if prev.get("code_fingerprint") else \
                    "; it records no code fingerprint, so a code change since cannot be seen"
                if (spec.logger or {}).get("name", "none") != "none":
                    note += (f"; logger={spec.logger['name']} logs nothing for it: its rows were "
                             f"recorded before, and force=true trains it again to log them")
                print(f"[skip] {spec.run_dir} already completed (force=true re-runs it{note})", flush=True)
                return prev, prev
        if not locked and (holder := rd.acquire()) is not None:
            return prev, _not_run(spec, schema.HELD, f"held by {rundir.describe(holder)}; skipped "
                                  f"(that process is training it)")
    return prev, None


def keep_prior(path: Path, prev: dict) -> Path:
    """A completed result about to be trained again (on_code_change=rerun) kept in the run
    folder as `prior-attempt-<n>/` (its metrics.parquet and summary.json), not overwritten.
    The folder is made anew (never an existing name or a link) and the table moved in."""
    n = int(prev.get("attempts") or 1)
    while True:
        prior = Path(path) / schema.prior_attempt_dir(n)
        try:
            os.mkdir(prior)
            break
        except FileExistsError:
            n += 1
    if (Path(path) / schema.METRICS).is_file():
        os.rename(Path(path) / schema.METRICS, prior / schema.METRICS)
    io.write_under(path, prior / schema.SUMMARY, json.dumps(prev, indent=1))
    print(f"[rerun] {path}: the old result kept in {prior.name}/ (`{spelled('collect')} "
          f"--prior-attempts` collects it beside the new one, each labelled by its code)", flush=True)
    return prior


def _same_code(spec: RunSpec, prev: dict) -> bool:
    """Whether `prev` (a summary) records today's code fingerprint, or none. A run recorded
    without code_scope has the narrower fingerprint (bench.fingerprint)."""
    old = prev.get("code_fingerprint")
    return not old or old == (spec.code_fingerprint if prev.get("code_scope")
                              else spec.narrow_fingerprint or spec.code_fingerprint)


def _code_changed(spec: RunSpec, prev: dict, said: bool) -> dict | None | bool:
    """A completed run against today's code: False where its code fingerprint is today's
    (or it records none), else as on_code_change says: the answer for `refuse` and
    `keep`, None for `rerun` (train it again; said once, `said` on the second look)."""
    old, new = prev.get("code_fingerprint"), spec.code_fingerprint
    if _same_code(spec, prev):
        return False
    what = f"completed under other code (code fingerprint {old}, today's {new})"
    if spec.run.on_code_change == "keep":
        print(f"[skip] {spec.run_dir} {what}: the old result is kept (on_code_change=keep)", flush=True)
        return prev
    if spec.run.on_code_change == "rerun":
        if not said:
            print(f"[rerun] {spec.run_dir} {what}: trained again (on_code_change=rerun)", flush=True)
        return None
    return _not_run(spec, schema.REFUSED, f"{what}; on_code_change=rerun trains it again, "
                    f"on_code_change=keep keeps the old result (force=true also re-runs it)")


def _table_damage(path) -> str | None:
    """What is wrong with a completed run's metrics table (missing, unreadable), or None.
    Its footer is read, not its rows: a skip stays cheap."""
    import pyarrow.parquet as pq

    if not path.exists():
        return f"{path.name} is missing"
    try:
        pq.read_metadata(path)
    except Exception as e:  # truncated, garbage, unreadable
        first = (str(e).strip().splitlines() or [""])[0][:160]
        return f"{path.name} cannot be read ({type(e).__name__}: {first})"
    return None


@dataclass
class Seat:
    """One run as a process carries it: its directory and record, then (from `start_seat`)
    its policy, optimizer and streams and where it stands. A single run has one seat; a
    seed-batched job one per seed (bench.runner.run_seeds), which is why the loop's bookkeeping
    (`start_seat`, `record_step`) takes a seat and not the loop's locals."""

    spec: RunSpec
    rd: rundir.RunDir
    label: str
    ident: dict[str, Any]
    attempt: int
    state: dict | None
    """the checkpoint resumed from, or None"""
    effective: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    policy: Any = None
    opt: Any = None
    streams: Streams | None = None
    start: int = 0
    cumulative: int = 0
    tokens: int = 0
    wall_before: float = 0.0
    t0: float = 0.0
    progress: "ProgressLine | None" = None
    tracker: tracking.Tracker | None = None


def failure(e: Exception) -> tuple[str, str, str]:
    """(status, reason, error_kind) of a run that raised `e`."""
    kind = schema.IO_ERROR if isinstance(e, OSError) else \
        schema.DIVERGED if isinstance(e, FloatingPointError) else schema.ERROR
    return schema.FAILED, f"{type(e).__name__}: {e}", kind


def open_seat(spec: RunSpec, rd: rundir.RunDir, prev: dict, batched: bool = False) -> Seat | dict[str, Any]:
    """The attempt's start on disk: the checkpoint read and checked, config.json and a
    `running` summary written (`batched`: this attempt trains in a seed batch,
    bench.engine). Returns the seat, or the answer for a refused checkpoint."""
    if spec.run.force:
        checkpoint.clear(rd.path)
    rd.clear_stale_temps()
    threads = _threads(spec.run.threads)
    ident = _checkpoint_identity(spec)
    try:
        state = checkpoint.load(rd.path)
        notes = checkpoint.check_identity(rd.path, state, ident, spec.run.resume_across_commits) \
            if state is not None else []
    except checkpoint.CheckpointError as e:
        return _not_run(spec, schema.REFUSED, str(e))
    if state is not None and not _same_code(spec, prev):
        what = (f"its checkpoint was written under other code (code fingerprint "
                f"{prev.get('code_fingerprint')}, today's {spec.code_fingerprint})")
        if spec.run.on_code_change == "refuse":
            return _not_run(spec, schema.REFUSED, f"{what}; on_code_change=keep resumes it under "
                            f"today's code, on_code_change=rerun starts it again (force=true too)")
        if spec.run.on_code_change == "rerun":
            print(f"[rerun] {spec.run_dir} {what}: started again (on_code_change=rerun)", flush=True)
            checkpoint.clear(rd.path)
            state, notes = None, []
        else:
            notes.append(f"{what}: resumed under today's code (on_code_change=keep); its "
                         f"curve mixes the two")
    record = _attempt_record(prev, spec, threads, ident, batched)
    if len(record["threads_used"]) > 1:
        notes.append(f"threads {record['threads_used']} across attempts: metrics are bitwise "
                     "reproducible for one thread count only")
    # Attempts from before this field was recorded cannot be told apart: no note for them.
    kernels = list(dict.fromkeys(a["cpu_kernels"] for a in record["attempts_log"] if a.get("cpu_kernels")))
    if len(kernels) > 1:
        notes.append(f"CPU kernels {kernels} across attempts: metrics are bitwise reproducible "
                     "for one instruction set only (ATEN_CPU_CAPABILITY selects a lower one)")
    rd.begin(_provenance(spec, rd, prev, record), {"seed": spec.run.seed, **spec.config})
    label = f"{spec.task.name}/{spec.algo_name} {spec.config_hash} seed={spec.run.seed}"
    for note in (*spec.notes, *notes):
        print(f"[{label}] {note}", flush=True)
    seat = Seat(spec, rd, label, ident, record["attempts"], state, dict(spec.effective))
    seat.tracker = tracking.Tracker(spec, seat.attempt)
    return seat


def close_seat(seat: Seat, status: str, reason: str | None, kind: str | None) -> dict[str, Any]:
    """The attempt's end on disk: metrics and the verdict; a completed run's checkpoint goes."""
    try:
        df = _metrics_frame(seat.spec, seat.rows, seat.effective, status)
    except Exception as e:  # the record must still say how the run ended
        df, status, kind = None, schema.FAILED, kind or schema.ERROR
        reason = "; then ".join(filter(None, [reason, f"{type(e).__name__} building {schema.METRICS}: {e}"]))
    summary = seat.rd.finish(df, status=status, reason=reason, error_kind=kind, rows=seat.rows,
                             **seat.effective)
    if seat.tracker is not None:
        seat.tracker.close(summary["status"])
    if summary["status"] == schema.COMPLETED:
        checkpoint.clear(seat.rd.path)
    else:
        print(f"[{seat.label}] {summary['status'].upper()}: {summary['reason']}", file=sys.stderr, flush=True)
    return summary


def _provenance(spec: RunSpec, rd: rundir.RunDir, prev: dict, record: dict) -> dict[str, Any]:
    """summary.json's fields that stay for the whole attempt."""
    return {"config_hash": spec.config_hash, "run_dir": str(spec.run_dir), "seed": spec.run.seed,
            "task": spec.task.name, "algo": spec.algo_name,
            "started_at": time.time() if spec.run.force else prev.get("started_at", time.time()),
            "versions": io.package_versions(), "device": spec.run.device,
            "lock": rd.lock_note or f"lockf on {schema.LOCK}",
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
            "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
            "code_fingerprint": spec.code_fingerprint, "code_files": list(spec.code_files),
            "code_scope": fingerprint.SCOPE, "rewrites": list(spec.rewrites),
            **record, **spec.effective}


def _metrics_frame(spec: RunSpec, rows: list[dict], effective: dict, status: str) -> pd.DataFrame:
    extra = [k for r in rows for k in r if k not in schema.METRIC_COLUMNS]
    df = pd.DataFrame(rows, columns=list(dict.fromkeys([*schema.METRIC_COLUMNS, *extra])))
    columns = {"config_hash": spec.config_hash, "seed": spec.run.seed,
               **flatten(spec.config), **effective, **spec.labels}
    for key, value in columns.items():
        df[key] = value
    df["partial"] = status != schema.COMPLETED
    return df


# ---------------------------------------------------------------- a seat's steps

def start_seat(seat: Seat) -> None:
    """The seat's policy, optimizer and streams, fresh or resumed from its checkpoint."""
    spec = seat.spec
    seat.streams = Streams.from_seed(spec.run.seed, spec.run.device)
    seat.policy = spec.task.make_policy(seat.streams.init).to(spec.run.device)
    seat.opt = build_optimizer(spec.optim_name, list(seat.policy.parameters()), **spec.optim_hparams)
    # Tasks with held-out evaluation log one row per evaluation, step = updates done
    # (the first before any update); the others one row per episode, step = its
    # 0-based index, error measured on its rollouts before its update (science §Token sequences).
    eval_every = spec.task.eval_every
    if seat.state is not None:
        state = seat.state
        seat.policy.load_state_dict(state["policy"])
        seat.opt.load_state_dict(state["optimizer"])
        seat.streams.load_state(state["streams"])
        seat.rows.extend(state["rows"])
        seat.start, seat.cumulative, seat.wall_before = state["next_step"], state["cumulative"], state["wall_s"]
        seat.tokens = state.get("tokens", 0)  # checkpoints from before the LLM family lack it
        print(f"[{seat.label}] resumed from checkpoint at step {seat.start} (attempt {seat.attempt})", flush=True)
    elif eval_every:
        seat.rows.append({"step": 0, "rollouts": 0, "wall_s": 0.0, **spec.task.evaluate(seat.policy)})
        if seat.tracker:
            seat.tracker.log(seat.rows[-1])
    seat.progress = ProgressLine(seat.label, spec.task.episodes, seat.start, bool(eval_every),
                                 spec.run.log_every, spec.run.progress_every_s)
    seat.t0 = time.perf_counter()


def check_finite(row: dict[str, Any], step: int, when: str = "") -> None:
    """FloatingPointError (the run is `diverged`) naming every metric of `row` that is not
    finite, before the step is recorded; a diagnostic undefined on an empty selection
    (schema.UNDEFINED_WHEN_EMPTY) may be NaN."""
    bad = [f"{k} {v}" for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)
           and not (k in schema.UNDEFINED_WHEN_EMPTY and math.isnan(v))]
    if bad:
        raise FloatingPointError(f"non-finite {', '.join(bad)} at {when}step {step}")


def record_step(seat: Seat, step: int, row: dict[str, Any], asked: bool, why: str) -> bool:
    """Episode `step`'s row into the seat's record: a metrics row (or an evaluation), the
    progress line, a checkpoint when due or `asked` (a signal, read once per step by the
    caller so that every seat of a batch sees the same answer). Returns whether it
    checkpointed (the caller then calls boundary.after_checkpoint, once for all its seats)."""
    spec, rows, eval_every = seat.spec, seat.rows, seat.spec.task.eval_every
    episodes = spec.task.episodes
    seat.effective["group_size_effective"] = row.pop("group_size")
    seat.cumulative += row.pop("rollouts")
    if "tokens" in row:  # generated tokens, cumulative like rollouts (the LLM family)
        seat.tokens += row.pop("tokens")
        row["tokens"] = seat.tokens
    row.update(step=step, rollouts=seat.cumulative, wall_s=seat.wall_before + time.perf_counter() - seat.t0)
    check_finite(row, step)
    done = step + 1
    recorded = len(rows)
    if not eval_every:
        rows.append(row)
    elif done % eval_every == 0 or done == episodes:
        evaluation = spec.task.evaluate(seat.policy)
        check_finite(evaluation, step, "the evaluation after ")
        rows.append({**row, "train_error": row["error"], "step": done, **evaluation})
    if len(rows) > recorded and seat.tracker:
        seat.tracker.log(rows[-1])
    seat.progress.after(done, row, rows[-1])
    if done < episodes and (done % spec.run.checkpoint_every == 0 or asked):
        seat.rd.checkpoint({"identity": seat.ident, "next_step": done, "cumulative": seat.cumulative,
                            "tokens": seat.tokens,
                            "wall_s": row["wall_s"], "policy": seat.policy.state_dict(),
                            "optimizer": seat.opt.state_dict(), "streams": seat.streams.state(),
                            "rows": rows}, done)
        if asked:
            print(f"[{seat.label}] checkpoint at step {done} ({why})", flush=True)
        return True
    seat.rd.beat_if_due()
    return False


class ProgressLine:
    """A progress line every `log_every` episodes, at the end, and at least every
    `every_s` seconds."""

    def __init__(self, label: str, episodes: int, start: int, evaluates: bool, log_every: int,
                 every_s: float):
        self.label, self.episodes, self.start, self.evaluates = label, episodes, start, evaluates
        self.log_every, self.every_s = log_every, every_s
        self.started = self.last = time.monotonic()

    def after(self, done: int, row: dict, last: dict) -> None:
        now = time.monotonic()
        if (self.log_every and done % self.log_every == 0) or done == self.episodes or \
                now - self.last >= self.every_s:
            progress_line(self.label, done, self.episodes, row, last, self.evaluates,
                      now - self.started, self.start)
            self.last = now


