"""One run: roll out, take `algo.epochs` optimizer steps on the batch, record, repeat;
the only module that runs tasks and algorithms together (bench.build joins them).

    run(spec)      the story: claim, open, start, train (_train), close
    train_episode  one episode (science §Update rules), shared with bench.batched and tools

A run's state in the process is a Seat; each step of the story takes one, so bench.batched
runs several seeds' seats through the same steps (its API here, beside EpisodeRow, read_rows):
    claim_run    the run directory's lock, or the answer for a run not to train
    open_seat    the checkpoint read and checked, config.json and a `running` summary
    start_seat   the seat's policy, optimizer and streams, fresh or resumed
    record_step  an episode's row into the record: progress line, checkpoint when due
    close_seat   the metrics table and the verdict
    as_kept      a metric as a row keeps it; flat_params: the trained weights as one vector
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from tpo_bench.algorithms import OVER_EPOCHS
from tpo_bench.bench import checkpoint, debug, dynamic, interrupts, rundir, tracking
from tpo_bench.bench.build import RunSpec
from tpo_bench.contract.identity import flatten
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.contract import io, schema
from tpo_bench.contract.batch import Batch, Request, Rollout, reference_kl
from tpo_bench.contract.rng import Streams


# ---------------------------------------------------------------- one episode

def _group_diagnostics(batch: Batch) -> dict[str, torch.Tensor | float]:
    """science §Measurement: all-fail and zero-variance fractions (NaN for single samples), left on the
    device (`read_rows` reads them)."""
    success = as_kept(batch.success.any(-1).float().mean())
    out = {"success_prompt_frac": success, "all_fail_frac": math.nan, "zero_var_frac": math.nan}
    if batch.group_size > 1:
        out["all_fail_frac"] = 1.0 - success
        out["zero_var_frac"] = (batch.scores.std(-1, correction=0) < schema.ZERO_VAR_STD).float().mean()
    return out


def group_diagnostics_seeds(batches: list[Batch]) -> list[dict[str, torch.Tensor | float]]:
    """`_group_diagnostics` of S batches of one shape, each a slice of one stacked
    computation (a row's mean rounds as its own tensor's: rows reduce alike)."""
    success = as_kept(torch.stack([b.success for b in batches]).any(-1).float().mean(-1))
    out = {"success_prompt_frac": success.unbind(), "all_fail_frac": [math.nan] * len(batches),
           "zero_var_frac": [math.nan] * len(batches)}
    if batches[0].group_size > 1:
        out["all_fail_frac"] = (1.0 - success).unbind()
        spread = torch.stack([b.scores for b in batches]).std(-1, correction=0)
        out["zero_var_frac"] = as_kept((spread < schema.ZERO_VAR_STD).float().mean(-1)).unbind()
    return [{k: v[s] for k, v in out.items()} for s in range(len(batches))]


def as_kept(value: torch.Tensor | float) -> torch.Tensor | float:
    """A metric as a row keeps it until `read_rows`: a tensor detached, in float64 (the
    arithmetic done on it then rounds as it did on the Python float it used to be read
    into at once), a number as a float."""
    return value.detach().double() if isinstance(value, torch.Tensor) else float(value)


def read_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An episode's rows (one per seed) with every tensor in them read as a Python float,
    all in one transfer: on a GPU, one wait for the device per episode, not one per seed
    and metric. The values are those float() gives, bit for bit."""
    at = [(row, k) for row in rows for k, v in row.items() if isinstance(v, torch.Tensor)]
    if at:
        values = torch.stack([row[k].detach().reshape(()).double() for row, k in at]).tolist()
        for (row, k), value in zip(at, values):
            row[k] = value
    return rows


@dataclass
class EpisodeRow:
    """One episode's metrics row as its epochs go by, the bookkeeping train_episode and
    bench.batched.train_episodes share (so a batched seed's row is its single run's):
    loss, gradient norm and metrics of the first epoch (the gradient at the behaviour
    policy), the OVER_EPOCHS metrics averaged over the epochs, then what the rollout and
    the update were. Values stay tensors until `read_rows`."""

    before: torch.Tensor
    """the trained parameters before the episode's first step"""
    row: dict[str, Any] = field(default_factory=dict)
    over_epochs: dict[str, Any] = field(default_factory=dict)

    def after_backward(self, epoch: int, task, policy, loss: torch.Tensor | float,
                       metrics: dict[str, torch.Tensor | float],
                       grad_norm: torch.Tensor | None = None) -> None:
        """Epoch `epoch`'s loss and metrics, its gradient in policy's .grad (before its step);
        `grad_norm` that gradient's norm where the caller has it (a seed batch's, `_norms`)."""
        if epoch == 0:
            grads = [p.grad.reshape(-1) for p in policy.parameters() if p.grad is not None]
            self.row["grad_norm"] = grad_norm if grad_norm is not None else \
                torch.cat(grads).norm() if grads else 0.0
            self.row["loss"] = as_kept(loss)
            self.row.update({k: as_kept(v) for k, v in metrics.items() if k not in OVER_EPOCHS})
            if hasattr(task, "grad_metrics"):  # e.g. misalignment to an oracle direction
                self.row.update(task.grad_metrics(policy))
        for k in OVER_EPOCHS:
            if k in metrics:
                self.over_epochs[k] = self.over_epochs.get(k, 0.0) + as_kept(metrics[k])

    def finish(self, epochs: int, ro: Rollout, first: Batch, policy,
               stacked: dict[str, Any] | None = None) -> dict[str, Any]:
        """The row, once the episode's `epochs` steps are taken: `ro` what was trained on,
        `first` the episode's own batch (what the group diagnostics describe). `stacked`:
        what a seed batch computed for all its seeds at once (bench.batched), this seed's
        "over_epochs" means, "param_change" and "diagnostics", each in place of its own."""
        row, stacked = self.row, stacked or {}
        row.update(stacked["over_epochs"] if "over_epochs" in stacked else
                   {k: total / epochs for k, total in self.over_epochs.items()})
        row["param_change"] = stacked["param_change"] if "param_change" in stacked else \
            (flat_params(policy) - self.before).norm()
        row.update(error=as_kept(ro.error), reward_mean=as_kept(ro.reward_mean), rollouts=ro.rollouts,
                   group_size=ro.batch.group_size, **ro.metrics)
        if ro.tokens is not None:
            row["tokens"] = ro.tokens
        row.update(stacked["diagnostics"] if "diagnostics" in stacked else _group_diagnostics(first))
        return row


def micro_batches(batch: Batch, micro_groups: int) -> list[tuple[Batch, float]]:
    """The batch cut into parts of `micro_groups` whole groups (0: one part), each with
    its share of the groups: gradient accumulation never splits a group (TPO's loss is a
    function of the whole group, science §Language models). A loss that is a mean over groups accumulates
    exactly; a token-mean one is normalised within each part (as TRL's per-device loss)."""
    N = batch.num_groups
    if not micro_groups or micro_groups >= N:
        return [(batch, 1.0)]
    starts = range(0, N, micro_groups)
    return [(batch.take(torch.arange(s, min(s + micro_groups, N), device=batch.scores.device)),
             (min(s + micro_groups, N) - s) / N) for s in starts]


def backward(task, algo, batch: Batch, policy, kl_ref: float) -> tuple[Any, dict[str, Any]]:
    """One full-batch gradient (accumulated over micro-batches): the loss and the
    algorithm's metrics, each the groups-weighted mean over the parts (kept: `as_kept`)."""
    # task.micro_batch counts completions; the task has checked it holds whole groups.
    parts = micro_batches(batch, getattr(task, "micro_batch", 0) // batch.group_size)
    loss_value, metrics = 0.0, {}
    for part, share in parts:
        logp = task.logprobs(policy, part)
        out = algo.loss(part, logp)
        loss = out.loss
        if kl_ref:  # the task's KL penalty to its reference, whatever the algorithm (science §Language models)
            loss = loss + kl_ref * reference_kl(part, logp)
        (loss if len(parts) == 1 else loss * share).backward()
        loss_value = loss_value + as_kept(loss) * share
        for k, v in out.metrics.items():
            metrics[k] = metrics.get(k, 0.0) + as_kept(v) * share
    return loss_value, metrics


def _phase_mark(clock: dict[str, float] | None, device: torch.device) -> float:
    """The time a phase ends, for `clock`. A GPU runs behind the host, so with a clock
    (benchmarks only: a run never waits here) the queued kernels finish first; otherwise
    one phase's work would be counted in the next one's."""
    if clock is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def train_episode(task, algo, request: Request, policy, opt, streams: Streams,
                  clock: dict[str, float] | None = None) -> dict[str, float]:
    """One episode: sample, then algo.epochs full-batch optimizer steps on it (science §Update rules).
    Loss and gradient norm are the first epoch's (before any update on this batch), the
    OVER_EPOCHS metrics the mean over epochs; `group_size` is the K the batch really
    had. `clock`, if given, accumulates seconds per phase (the speed benchmark reads it)."""
    device = next(policy.parameters()).device
    t0 = _phase_mark(clock, device)
    ro = task.rollout(policy, request, streams)
    first = ro.batch  # what the error and the group diagnostics describe
    extra: dict[str, float] = {}
    if getattr(algo, "dynamic_sampling", 0):
        ro, extra = dynamic.top_up(ro, lambda: task.rollout(policy, request, streams.extra()),
                                   algo.dynamic_sampling)
    t1 = _phase_mark(clock, device)
    book = EpisodeRow(flat_params(policy), dict(extra))
    kl_ref = getattr(task, "kl_ref", 0.0) if ro.batch.logp_ref is not None else 0.0
    for epoch in range(algo.epochs):
        opt.zero_grad(set_to_none=True)
        loss, metrics = backward(task, algo, ro.batch, policy, kl_ref)
        book.after_backward(epoch, task, policy, loss, metrics)
        opt.step()
    t2 = _phase_mark(clock, device)
    [row] = read_rows([book.finish(algo.epochs, ro, first, policy)])
    if clock is not None:
        t3 = time.perf_counter()
        for phase, dt in (("generation", t1 - t0), ("training", t2 - t1), ("bookkeeping", t3 - t2)):
            clock[phase] = clock.get(phase, 0.0) + dt
    return row


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """The trained parameters as one detached vector (a LoRA run's frozen base left out:
    it would be copied every episode)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])


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
    return {"config_hash": spec.config_hash, "seed": spec.seed, "episodes": spec.task.episodes,
            "torch": str(torch.__version__), "git_commit": io.git_commit()}


def cpu_kernels() -> str:
    """The instruction set torch's CPU kernels dispatch to here (AVX512, AVX2, ...; the
    environment variable ATEN_CPU_CAPABILITY can lower it). Their reductions (softmax,
    sums, norms) round differently from one to another, so metrics are bitwise
    reproducible for one of them only: the same torch on an AVX2 and an AVX512 machine
    gives curves that differ in the last bits (more in a quantity that cancels, like
    misalignment = 1 - cos)."""
    return torch.backends.cpu.get_cpu_capability()


def _attempt_record(prev: dict, spec: RunSpec, threads: int, identity_: dict,
                    batched: bool) -> dict[str, Any]:
    """summary.json's fields that describe this attempt and every one before it: a run
    resumed under other code, another thread count, other CPU kernels or in a seed batch
    says so."""
    log = [] if spec.force else list(prev.get("attempts_log", []))
    log.append({"attempt": len(log) + 1, "started_at": time.time(), "pid": os.getpid(),
                "host": rundir.whoami()["host"], "git_commit": identity_["git_commit"],
                "code_fingerprint": spec.code_fingerprint,
                "threads": threads, "cpu_kernels": cpu_kernels(), "batch_seeds": batched,
                "slurm_job_id": os.environ.get("SLURM_JOB_ID")})
    # Runs from before the attempt log: their attempt count and the commit they started under.
    earlier = 0 if spec.force else max(prev.get("attempts", 0) - (len(log) - 1), 0)
    legacy = not spec.force and "attempts_log" not in prev and prev.get("git_commit")
    commits = (prev.get("git_commits") or [prev["git_commit"]]) if legacy else []
    for a in log:
        if not commits or commits[-1] != a["git_commit"]:
            commits.append(a["git_commit"])
    threads_used = list(dict.fromkeys(
        ([] if spec.force or "threads" not in prev else [prev["threads"]]) + [a["threads"] for a in log]))
    return {"attempts": earlier + len(log), "attempts_log": log, "git_commit": identity_["git_commit"],
            "git_commits": commits, "threads": threads, "threads_used": threads_used}


def _not_run(spec: RunSpec, status: str, reason: str) -> dict[str, Any]:
    """A run this process did not touch (held by another, or refused): said on stderr and
    returned to the sweep's report; nothing in the directory changes."""
    print(f"[{status}] {spec.run_dir}: {reason}", file=sys.stderr, flush=True)
    return {"run_dir": str(spec.run_dir), "status": status, "reason": reason}


# ---------------------------------------------------------------- the run

def run(spec: RunSpec) -> dict[str, Any]:
    """Train one (config, seed) into spec.run_dir and return its summary. A completed run
    is skipped (unless spec.force); one another process holds is left to it; an
    interrupted one resumes from its checkpoint, if that checkpoint is this run's; a
    failure is recorded (status, reason, partial metrics) and returned, not raised."""
    rd = rundir.RunDir(spec.run_dir, pause_s=spec.debug.get("checkpoint_pause", 0.0))
    prev, answer = claim_run(spec, rd)
    if answer is not None:
        return answer
    try:
        # From here on a stop signal waits for an episode boundary (or the end).
        with interrupts.Boundary() as boundary:
            return _attempt(spec, rd, prev, boundary)
    finally:
        rd.release()


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
            if not spec.force:
                rd.release()
                return {}, _not_run(spec, schema.REFUSED, f"{e}; remove it (the run then resumes "
                                    f"from its checkpoint, if any) or force=true restarts the run")
            prev = {}
        if prev.get("status") == schema.COMPLETED and not spec.force:
            if damage := _table_damage(rd.path / schema.METRICS):
                rd.release()
                return prev, _not_run(spec, schema.REFUSED, f"completed, but its {damage}: the "
                                      f"result is damaged; force=true re-runs it")
            if (answer := _code_changed(spec, prev, locked)) is not False:
                if answer is not None:
                    rd.release()
                    return prev, answer
            else:
                rd.release()
                note = "" if prev.get("code_fingerprint") else \
                    "; it records no code fingerprint, so a code change since cannot be seen"
                print(f"[skip] {spec.run_dir} already completed (force=true re-runs it{note})", flush=True)
                return prev, prev
        if not locked and (holder := rd.acquire()) is not None:
            return prev, _not_run(spec, schema.HELD, f"held by {rundir.describe(holder)}; skipped "
                                  f"(that process is training it)")
    return prev, None


def _code_changed(spec: RunSpec, prev: dict, said: bool) -> dict | None | bool:
    """A completed run against today's code: False where its code fingerprint is today's
    (or it records none), else as on_code_change says: the answer for `refuse` and
    `keep`, None for `rerun` (train it again; said once, `said` on the second look)."""
    old, new = prev.get("code_fingerprint"), spec.code_fingerprint
    if not old or old == new:
        return False
    what = f"completed under other code (code fingerprint {old}, today's {new})"
    if spec.on_code_change == "keep":
        print(f"[skip] {spec.run_dir} {what}: the old result is kept (on_code_change=keep)", flush=True)
        return prev
    if spec.on_code_change == "rerun":
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
    seed-batched job one per seed (bench.batched), which is why the loop's bookkeeping
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


def _attempt(spec: RunSpec, rd: rundir.RunDir, prev: dict, boundary: interrupts.Boundary) -> dict[str, Any]:
    """One attempt at a run whose lock this process holds: resume or start, train, and
    record how it ended, whatever the ending."""
    seat = open_seat(spec, rd, prev)
    if isinstance(seat, dict):
        return seat
    status, reason, kind = schema.COMPLETED, None, None
    try:
        _train(seat, boundary)
    except Exception as e:
        status, reason, kind = failure(e)
    except BaseException as e:  # interrupted (a signal, Ctrl-C): resumable from the checkpoint
        status, reason = schema.INTERRUPTED, getattr(e, "signame", type(e).__name__)
        raise
    finally:
        summary = close_seat(seat, status, reason, kind)
    return summary


def failure(e: Exception) -> tuple[str, str, str]:
    """(status, reason, error_kind) of a run that raised `e`."""
    kind = schema.IO_ERROR if isinstance(e, OSError) else \
        schema.DIVERGED if isinstance(e, FloatingPointError) else schema.ERROR
    return schema.FAILED, f"{type(e).__name__}: {e}", kind


def open_seat(spec: RunSpec, rd: rundir.RunDir, prev: dict, batched: bool = False) -> Seat | dict[str, Any]:
    """The attempt's start on disk: the checkpoint read and checked, config.json and a
    `running` summary written (`batched`: this attempt trains in a seed batch,
    bench.batched). Returns the seat, or the answer for a refused checkpoint."""
    if spec.force:
        checkpoint.clear(rd.path)
    rd.clear_stale_temps()
    threads = _threads(spec.threads)
    ident = _checkpoint_identity(spec)
    try:
        state = checkpoint.load(rd.path)
        notes = checkpoint.check_identity(rd.path, state, ident, spec.resume_across_commits) \
            if state is not None else []
    except checkpoint.CheckpointError as e:
        return _not_run(spec, schema.REFUSED, str(e))
    record = _attempt_record(prev, spec, threads, ident, batched)
    if len(record["threads_used"]) > 1:
        notes.append(f"threads {record['threads_used']} across attempts: metrics are bitwise "
                     "reproducible for one thread count only")
    # Attempts from before this field was recorded cannot be told apart: no note for them.
    kernels = list(dict.fromkeys(a["cpu_kernels"] for a in record["attempts_log"] if a.get("cpu_kernels")))
    if len(kernels) > 1:
        notes.append(f"CPU kernels {kernels} across attempts: metrics are bitwise reproducible "
                     "for one instruction set only (ATEN_CPU_CAPABILITY selects a lower one)")
    rd.begin(_provenance(spec, rd, prev, record), {"seed": spec.seed, **spec.config})
    label = f"{spec.task.name}/{spec.algo_name} {spec.config_hash} seed={spec.seed}"
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
    return {"config_hash": spec.config_hash, "run_dir": str(spec.run_dir), "seed": spec.seed,
            "task": spec.task.name, "algo": spec.algo_name,
            "started_at": time.time() if spec.force else prev.get("started_at", time.time()),
            "versions": io.package_versions(), "device": spec.device,
            "lock": rd.lock_note or f"lockf on {schema.LOCK}",
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
            "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
            "code_fingerprint": spec.code_fingerprint, "code_files": list(spec.code_files),
            **record, **spec.effective}


def _metrics_frame(spec: RunSpec, rows: list[dict], effective: dict, status: str) -> pd.DataFrame:
    extra = [k for r in rows for k in r if k not in schema.METRIC_COLUMNS]
    df = pd.DataFrame(rows, columns=list(dict.fromkeys([*schema.METRIC_COLUMNS, *extra])))
    columns = {"config_hash": spec.config_hash, "seed": spec.seed,
               **flatten(spec.config), **effective, **spec.labels}
    for key, value in columns.items():
        df[key] = value
    df["partial"] = status != schema.COMPLETED
    return df


# ---------------------------------------------------------------- the loop

def _train(seat: Seat, boundary: interrupts.Boundary) -> None:
    """The training loop, appending to `seat.rows` (so a failure still records them) and
    filling `seat.effective` with what the batches really were. It checkpoints every
    spec.checkpoint_every episodes and whenever a signal asks (interrupts.Boundary),
    always at an episode boundary."""
    start_seat(seat)
    spec = seat.spec
    episode = debug.inject(lambda: train_episode(spec.task, spec.algo, spec.request, seat.policy,
                                                 seat.opt, seat.streams), spec.debug)
    for step in range(seat.start, spec.task.episodes):
        row = episode(step)
        if record_step(seat, step, row, boundary.pending, boundary.why):
            boundary.after_checkpoint()


def start_seat(seat: Seat) -> None:
    """The seat's policy, optimizer and streams, fresh or resumed from its checkpoint."""
    spec = seat.spec
    seat.streams = Streams.from_seed(spec.seed, spec.device)
    seat.policy = spec.task.make_policy(seat.streams.init).to(spec.device)
    seat.opt = build_optimizer(spec.optim_name, list(seat.policy.parameters()), **spec.optim_hparams)
    # Tasks with held-out evaluation log one row per evaluation, step = updates done
    # (the first before any update); the others one row per episode, step = its
    # 0-based index, error measured on its rollouts before its update (science §Token sequences).
    eval_every = getattr(spec.task, "eval_every", 0)
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
                                 spec.log_every, spec.progress_every_s)
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
    spec, rows, eval_every = seat.spec, seat.rows, getattr(seat.spec.task, "eval_every", 0)
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
    if done < episodes and (done % spec.checkpoint_every == 0 or asked):
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


