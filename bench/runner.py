"""One run: build a task, an algorithm and an optimizer from the config, then loop
rollout -> epochs of (log-probs, loss, step) -> metrics. The only module that knows
both tasks and algorithms.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import tempfile
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from algorithms import ALGORITHMS
from bench import checkpoint, interrupts, rundir
from contract import io
from contract.batch import GROUP_NEEDS, NEEDS, Batch, Request
from bench.identity import config_hash, flatten, identity
from bench.optim import build_optimizer, check_optimizer
from contract.registry import UnknownName, load_plugins
from contract.rng import Streams
from contract.schema import HEARTBEAT_S, METRIC_COLUMNS, run_dir
from tasks import TASKS

ZERO_VAR_STD = 1e-6  # SPEC 6
MATCH_MODES = ("prompts", "interactions")


class ConfigError(ValueError):
    """Bad input, found before any work or directory is created."""


@dataclass(frozen=True)
class RunSpec:
    task: Any
    algo: Any
    algo_name: str
    optim_name: str
    optim_hparams: dict[str, float]
    seed: int
    device: str
    threads: int
    log_every: int
    force: bool
    checkpoint_every: int
    debug: dict[str, float]
    """test-only fault injection: nan_at (step), sleep (s/episode), checkpoint_pause (s)"""
    config: dict[str, Any]
    """resolved scientific config (what the hash and the parquet columns carry)"""
    config_hash: str
    run_dir: Path
    request: Request
    effective: dict[str, Any] = dataclasses.field(default_factory=dict)
    """what the run really uses after matching: batch size, learning rate"""
    notes: tuple[str, ...] = ()
    """lines printed when the run starts (matching arithmetic)"""
    labels: dict[str, Any] = dataclasses.field(default_factory=dict)
    """columns that describe but do not identify the run (the experiment preset)"""
    resume_across_commits: bool = True
    """resume a checkpoint written under another git commit (recorded either way)"""
    progress_every_s: float = 30.0
    """a progress line at least this often (besides every log_every episodes)"""

    @property
    def lr(self) -> float | None:
        return self.optim_hparams.get("lr")


# ---------------------------------------------------------------- building a run

def _instantiate(registry, section: dict[str, Any], key: str):
    """Registered dataclass from a config section; the section's `impl` (default: its
    `name`) picks the implementation, so a variant is a yaml with other field values."""
    section = dict(section)
    name = section.get("name")
    if not name:
        raise ConfigError(f"{key}.name is missing")
    impl = section.pop("impl", None) or name
    try:
        cls = registry.get(impl)
    except UnknownName as e:
        raise ConfigError(f"{key}: {e}") from None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if "name" not in fields:
        section.pop("name")
    unknown = sorted(set(section) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key {key}.{unknown[0]} for {registry.kind} {impl!r}; "
                          f"valid keys: {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(cls)
    for field, value in section.items():
        want = hints.get(field)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            section[field] = float(value)
        elif want in (int, float, bool, str) and not isinstance(section[field], want) or (
                want in (int, float) and isinstance(value, bool)):
            raise ConfigError(f"{key}.{field}={value!r} should be of type {want.__name__}")
    try:
        obj = cls(**section)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None
    return impl, obj


def identity_fields(obj) -> dict[str, Any]:
    """Dataclass fields that define the science (a field marked
    metadata={"identity": False}, such as a data folder, does not). A field marked
    {"identity": "if_set"} counts only away from its default: a knob added later leaves
    the hashes, and so the completed runs, of every configuration that does not use it."""
    out = {}
    for f in dataclasses.fields(obj):
        mode, value = f.metadata.get("identity", True), getattr(obj, f.name)
        if mode is True or (mode == "if_set" and value != f.default):
            out[f.name] = value
    return out


def needs(algo) -> str:
    """What the algorithm consumes (contract.batch.NEEDS); a plug-in that does not say is a
    grouped method when its default k is above 1."""
    default_k = next(f.default for f in dataclasses.fields(algo) if f.name == "k")
    return getattr(algo, "needs", "sample_group" if default_k > 1 else "sample")


def is_grouped(algo) -> bool:
    return needs(algo) in GROUP_NEEDS


def _check_algorithm(algo, name: str) -> None:
    if needs(algo) not in NEEDS:
        raise ConfigError(f"algorithm {name!r} declares needs={needs(algo)!r}; "
                          f"valid: {', '.join(NEEDS)}")
    grouped = is_grouped(algo)
    if grouped and algo.k < 2:
        raise ConfigError(f"algo.k={algo.k}: {name} is a grouped method and needs a group "
                          "of at least 2 candidates")
    if not grouped and algo.k != 1:
        raise ConfigError(f"algo.k={algo.k}: {name} is a single-sample method; "
                          "algo.k must be 1")
    if algo.epochs < 1:
        raise ConfigError(f"algo.epochs must be a positive integer, got {algo.epochs}")


# A name becomes one directory level under output_root: no separators, no "." or "..",
# nothing hidden (collect skips nothing hidden, and Hydra's logs live in .hydra/), no "="
# (collect finds runs by their "seed=<n>" level).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_.+-]*")


def _check_plain_name(key: str, value: Any) -> None:
    if not isinstance(value, str) or not PLAIN_NAME.fullmatch(value):
        raise ConfigError(f"{key}={value!r} must be a plain name (letters, digits, '_', '+', "
                          "'-', '.'; not starting with '.' or '-'): it names a directory "
                          "under output_root")


def _check_device(device: Any) -> None:
    """Refuse a device this machine lacks here, not as a failed run inside its directory."""
    choices = ["cpu"]
    if torch.cuda.is_available():
        choices += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        choices.append("mps")
    if device not in choices:
        raise ConfigError(f"device={device!r} is not available on this machine; valid choices: "
                          f"{', '.join(choices)}")


def _count(cfg: dict[str, Any], key: str, default: int, least: int = 0, hint: str = "") -> int:
    """cfg[key] as an integer >= least (a bool is not one), else the key and the rule."""
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        rule = "a positive integer" if least == 1 else "a non-negative integer"
        raise ConfigError(f"{key} must be {rule}{hint}, got {value!r}")
    return value


def build(cfg: dict[str, Any], explicit: frozenset[str] = frozenset()) -> RunSpec:
    """Validate everything and resolve the run; creates nothing on disk. `explicit` holds
    the config keys the user set on the command line."""
    for section in ("task", "algo"):
        if cfg[section].get("name") is not None:  # a missing name is _instantiate's to report
            _check_plain_name(f"{section}.name", cfg[section]["name"])
    load_plugins(list(cfg.get("plugins") or []))
    task_impl, task = _instantiate(TASKS, cfg["task"], "task")
    algo_impl, algo = _instantiate(ALGORITHMS, cfg["algo"], "algo")
    _check_plain_name("task.name", task.name)  # a plug-in task may name itself
    _check_algorithm(algo, cfg["algo"]["name"])
    steps = getattr(task, "steps_per_batch", None)
    if steps is not None and algo.epochs != steps:
        if "algo.epochs" in explicit:
            raise ConfigError(f"algo.epochs={algo.epochs}: task {task.name!r} takes {steps} "
                              "optimizer step(s) per batch for every method; do not set algo.epochs")
        algo = dataclasses.replace(algo, epochs=steps)  # recorded as what really runs
    request = Request(name=cfg["algo"]["name"], k=algo.k, level=getattr(algo, "level", "sequence"),
                      needs=needs(algo), k_explicit="algo.k" in explicit)
    try:
        task.check_algorithm(request)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    optim = dict(cfg["optim"])
    hparams = {k: v for k, v in optim.items() if k != "name"}
    try:
        check_optimizer(optim.get("name"), hparams)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    seed = _count(cfg, "seed", 0)
    threads = _count(cfg, "threads", 0, hint=" (0: as many as this process was allotted)")
    _check_device(cfg.get("device", "cpu"))
    checkpoint_every = _count(cfg, "checkpoint_every", 250, least=1)
    log_every = _count(cfg, "log_every", 50, hint=" (0: no line by episode count)")
    progress_every_s = cfg.get("progress_every_s", 30)
    if not isinstance(progress_every_s, (int, float)) or isinstance(progress_every_s, bool) or \
            not math.isfinite(progress_every_s) or progress_every_s < 0:
        raise ConfigError(f"progress_every_s must be a non-negative number of seconds (0: a line "
                          f"every episode), got {progress_every_s!r}")
    _check_writable(cfg.get("output_root", "outputs"))

    run_task, hparams, notes, match = _match(cfg, task, algo, hparams)

    # Hash what actually runs: the dataclasses' full field values, defaults included.
    science = {k: v for k, v in cfg.items() if k not in ("task", "algo", "optim")}
    # Interaction matching is the identity for a method that already draws K candidates per
    # prompt: the run is the prompt-matched one, stored (and skipped) under one hash.
    science["match"] = match
    science["task"] = {"impl": task_impl, **identity_fields(task)}
    science["algo"] = {"name": cfg["algo"]["name"], "impl": algo_impl, **dataclasses.asdict(algo)}
    science["optim"] = optim
    science = identity(science)
    h = config_hash(science)
    effective = {"batch_size_effective": getattr(run_task, "batch_size", None),
                 "lr_effective": hparams.get("lr")}
    return RunSpec(
        task=run_task, algo=algo, algo_name=cfg["algo"]["name"], optim_name=optim["name"],
        optim_hparams=hparams, seed=seed, request=request, effective=effective, notes=notes,
        labels={"experiment": cfg.get("experiment")},
        resume_across_commits=bool(cfg.get("resume_across_commits", True)), device=str(cfg.get("device", "cpu")),
        threads=int(cfg.get("threads", 0)), log_every=log_every,
        progress_every_s=float(progress_every_s),
        force=bool(cfg.get("force", False)), checkpoint_every=checkpoint_every,
        debug=dict(cfg.get("debug") or {}), config=science, config_hash=h,
        run_dir=run_dir(cfg.get("output_root", "outputs"), task.name, cfg["algo"]["name"], h, seed),
    )


def _check_writable(root: str) -> None:
    """Refuse an output root we could not write, before anything is created: probe the
    nearest existing ancestor with a temp file that vanishes on close."""
    p = Path(root).absolute()
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise ConfigError(f"output_root={root}: {p} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=p):
            pass
    except OSError as e:
        raise ConfigError(f"output_root={root}: cannot write under {p} ({e.strerror})") from None


def _match(cfg: dict[str, Any], task, algo, hparams: dict[str, float]):
    """SPEC 3.1 matching modes. Interaction matching gives single-sample methods B*K
    prompts and lr * sqrt(K) on both optimizer branches; grouped and token-level
    methods run unchanged (they already see K candidates per prompt), so for them the
    effective mode is "prompts". Returns (task, hparams, notes, effective mode)."""
    mode, K = cfg.get("match", "prompts"), cfg.get("match_k", 8)
    if mode not in MATCH_MODES:
        raise ConfigError(f"match={mode!r} is not one of {', '.join(MATCH_MODES)}")
    if not isinstance(K, int) or K < 1:
        raise ConfigError(f"match_k must be a positive integer, got {K!r}")
    name = cfg["algo"]["name"]
    if mode == "prompts":
        return task, hparams, (), mode
    if is_grouped(algo) or getattr(algo, "level", "sequence") == "token":
        return task, hparams, (f"match=interactions: {name} is grouped or token-level; batch "
                               f"size and learning rate unchanged ({hparams}): this is the "
                               f"prompt-matched run, recorded as match=prompts",), "prompts"
    if not hasattr(task, "batch_size") or "lr" not in hparams:
        raise ConfigError(f"match=interactions scales task.batch_size and optim.lr; task "
                          f"{task.name!r} with optim={cfg['optim']['name']} lacks one of them")
    B, lr = task.batch_size, hparams["lr"]
    matched = dataclasses.replace(task, batch_size=B * K)
    return matched, {**hparams, "lr": lr * math.sqrt(K)}, (
        f"match=interactions: {name} gets B*K = {B}*{K} = {B * K} prompts per episode and "
        f"lr {lr:g} * sqrt({K}) = {lr * math.sqrt(K):g} on both optimizer branches",), mode


# ---------------------------------------------------------------- running it

def _group_diagnostics(batch: Batch) -> dict[str, float]:
    """SPEC 6: all-fail and zero-variance fractions (NaN for single samples)."""
    has_success = batch.success.any(-1).float()
    out = {"success_prompt_frac": float(has_success.mean()),
           "all_fail_frac": math.nan, "zero_var_frac": math.nan}
    if batch.group_size > 1:
        out["all_fail_frac"] = 1.0 - out["success_prompt_frac"]
        out["zero_var_frac"] = float((batch.scores.std(-1, correction=0) < ZERO_VAR_STD).float().mean())
    return out


def _flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


def train_episode(task, algo, request: Request, policy, opt, streams: Streams,
                  clock: dict[str, float] | None = None) -> dict[str, float]:
    """One episode: sample, then algo.epochs full-batch optimizer steps on it (SPEC 2).
    Loss and gradient norm are the first epoch's (before any update on this batch).
    `clock`, if given, accumulates seconds per phase (the speed benchmark reads it)."""
    t0 = time.perf_counter()
    ro = task.rollout(policy, request, streams)
    t1 = time.perf_counter()
    before = _flat_params(policy)
    row: dict[str, float] = {}
    for epoch in range(algo.epochs):
        out = algo.loss(ro.batch, task.logprobs(policy, ro.batch))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        if epoch == 0:
            grads = [p.grad.reshape(-1) for p in policy.parameters() if p.grad is not None]
            row["grad_norm"] = float(torch.cat(grads).norm()) if grads else 0.0
            row["loss"] = out.loss.item()
            row.update({k: float(v) for k, v in out.metrics.items()})
            if hasattr(task, "grad_metrics"):  # e.g. misalignment to an oracle direction
                row.update(task.grad_metrics(policy))
        opt.step()
    t2 = time.perf_counter()
    row["param_change"] = float((_flat_params(policy) - before).norm())
    row.update(error=float(ro.error), reward_mean=float(ro.reward_mean), rollouts=ro.rollouts)
    row.update(_group_diagnostics(ro.batch))
    if clock is not None:
        t3 = time.perf_counter()
        for phase, dt in (("generation", t1 - t0), ("training", t2 - t1), ("bookkeeping", t3 - t2)):
            clock[phase] = clock.get(phase, 0.0) + dt
    return row


def _progress(label: str, done: int, episodes: int, row: dict, last: dict, evaluates: bool,
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


def _attempt_record(prev: dict, spec: RunSpec, threads: int, identity_: dict) -> dict[str, Any]:
    """summary.json's fields that describe this attempt and every one before it: a run
    resumed under other code or another thread count says so."""
    log = [] if spec.force else list(prev.get("attempts_log", []))
    log.append({"attempt": len(log) + 1, "started_at": time.time(), "pid": os.getpid(),
                "host": rundir.whoami()["host"], "git_commit": identity_["git_commit"],
                "threads": threads, "slurm_job_id": os.environ.get("SLURM_JOB_ID")})
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


def run(spec: RunSpec) -> dict[str, Any]:
    """Train one (config, seed) into spec.run_dir and return its summary. A completed run
    is skipped (unless spec.force); one another process holds is left to it; an
    interrupted one resumes from its checkpoint, if that checkpoint is this run's; a
    failure is recorded (status, reason, partial metrics) and returned, not raised."""
    rd = rundir.RunDir(spec.run_dir)
    for locked in (False, True):  # again under the lock: another may just have finished
        try:
            prev = rd.previous()
        except io.DamagedFile as e:
            if not spec.force:
                rd.release()
                return _not_run(spec, "refused", f"{e}; remove it (the run then resumes from "
                                                 f"its checkpoint, if any) or force=true restarts the run")
            prev = {}
        if prev.get("status") == "completed" and not spec.force:
            rd.release()
            print(f"[skip] {spec.run_dir} already completed (force=true re-runs it)", flush=True)
            return prev
        if not locked and (holder := rd.acquire()) is not None:
            return _not_run(spec, "held", f"held by {rundir.describe(holder)}; skipped (that "
                                          f"process is training it)")
    try:
        # From here on a stop signal waits for an episode boundary (or the end).
        with interrupts.Boundary() as boundary:
            return _attempt(spec, rd, prev, boundary)
    finally:
        rd.release()


def _attempt(spec: RunSpec, rd: rundir.RunDir, prev: dict,
             boundary: interrupts.Boundary) -> dict[str, Any]:
    """One attempt at a run whose lock this process holds."""
    if spec.force:
        checkpoint.clear(rd.path)
    rd.clear_stale_temps()
    threads = _threads(spec.threads)
    ident = _checkpoint_identity(spec)
    label = f"{spec.task.name}/{spec.algo_name} {spec.config_hash} seed={spec.seed}"
    try:
        state = checkpoint.load(rd.path)
        notes = checkpoint.check_identity(rd.path, state, ident, spec.resume_across_commits) \
            if state is not None else []
    except checkpoint.CheckpointError as e:
        return _not_run(spec, "refused", str(e))
    record = _attempt_record(prev, spec, threads, ident)
    if len(record["threads_used"]) > 1:
        notes.append(f"threads {record['threads_used']} across attempts: metrics are bitwise "
                     "reproducible for one thread count only")
    base = {"config_hash": spec.config_hash, "run_dir": str(spec.run_dir), "seed": spec.seed,
            "task": spec.task.name, "algo": spec.algo_name,
            "started_at": time.time() if spec.force else prev.get("started_at", time.time()),
            "versions": io.package_versions(), "device": spec.device, "lock": rd.lock_note or f"lockf on {rundir.LOCK}",
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
            "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"), **record, **spec.effective}
    rd.write_config({"seed": spec.seed, **spec.config})

    def heartbeat(**extra) -> None:
        rd.write_summary({**base, "status": "running", "reason": None, "heartbeat": time.time(), **extra})

    heartbeat()
    for note in (*spec.notes, *notes):
        print(f"[{label}] {note}", flush=True)
    rows: list[dict[str, Any]] = []
    status, reason, kind = "completed", None, None
    try:
        _train(spec, state, ident, rows, heartbeat, boundary, label, record["attempts"])
    except Exception as e:
        status, reason = "failed", f"{type(e).__name__}: {e}"
        kind = "io" if isinstance(e, OSError) else "diverged" if isinstance(e, FloatingPointError) else "error"
    except BaseException as e:  # interrupted (a signal, Ctrl-C): resumable from the checkpoint
        status, reason = "interrupted", getattr(e, "signame", type(e).__name__)
        raise
    finally:
        summary = rd.finish(_metrics_frame(spec, rows, status), {
            **base, "status": status, "reason": reason, "error_kind": kind,
            "final": {k: v for k, v in (rows[-1] if rows else {}).items() if isinstance(v, (int, float))},
            "rows": len(rows), "finished_at": time.time(),
            "duration_s": time.time() - base["started_at"]})
        if summary["status"] == "completed":
            checkpoint.clear(rd.path)
        else:
            print(f"[{label}] {summary['status'].upper()}: {summary['reason']}", file=sys.stderr, flush=True)
    return summary


def _metrics_frame(spec: RunSpec, rows: list[dict], status: str) -> pd.DataFrame:
    extra = [k for r in rows for k in r if k not in METRIC_COLUMNS]
    df = pd.DataFrame(rows, columns=list(dict.fromkeys([*METRIC_COLUMNS, *extra])))
    columns = {"config_hash": spec.config_hash, "seed": spec.seed,
               **flatten(spec.config), **spec.effective, **spec.labels}
    for key, value in columns.items():
        df[key] = value
    df["partial"] = status != "completed"
    return df


def _train(spec: RunSpec, state: dict | None, ident: dict, rows: list, heartbeat, boundary,
           label: str, attempt: int) -> None:
    """The training loop, appending to `rows` (so a failure still records them). It
    checkpoints every spec.checkpoint_every episodes and whenever a signal asks
    (interrupts.Boundary), always at an episode boundary."""
    streams = Streams.from_seed(spec.seed, spec.device)
    policy = spec.task.make_policy(streams.init).to(spec.device)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    episodes = spec.task.episodes
    # Tasks with held-out evaluation log one row per evaluation, step = updates done
    # (the first before any update); the others one row per episode, step = its
    # 0-based index, error measured on its rollouts before its update (SPEC 3.1).
    eval_every = getattr(spec.task, "eval_every", 0)
    start, cumulative, wall_before = 0, 0, 0.0
    if state is not None:
        policy.load_state_dict(state["policy"])
        opt.load_state_dict(state["optimizer"])
        streams.load_state(state["streams"])
        rows.extend(state["rows"])
        start, cumulative, wall_before = state["next_step"], state["cumulative"], state["wall_s"]
        print(f"[{label}] resumed from checkpoint at step {start} (attempt {attempt})", flush=True)
    elif eval_every:
        rows.append({"step": 0, "rollouts": 0, "wall_s": 0.0, **spec.task.evaluate(policy)})
    t0, last_beat = time.perf_counter(), time.time()
    started = last_line = time.monotonic()
    for step in range(start, episodes):
        row = train_episode(spec.task, spec.algo, spec.request, policy, opt, streams)
        if step == spec.debug.get("nan_at", -1):
            row["loss"] = math.nan  # test-only fault injection
        cumulative += row.pop("rollouts")
        row.update(step=step, rollouts=cumulative, wall_s=wall_before + time.perf_counter() - t0)
        if not math.isfinite(row["loss"]):
            raise FloatingPointError(f"non-finite loss {row['loss']} at step {step}")
        done = step + 1
        if not eval_every:
            rows.append(row)
        elif done % eval_every == 0 or done == episodes:
            rows.append({**row, "train_error": row["error"], "step": done,
                         **spec.task.evaluate(policy)})
        now = time.monotonic()
        if (spec.log_every and done % spec.log_every == 0) or done == episodes or \
                now - last_line >= spec.progress_every_s:
            _progress(label, done, episodes, row, rows[-1], bool(eval_every), now - started, start)
            last_line = now
        if spec.debug.get("sleep"):
            time.sleep(spec.debug["sleep"])
        if done < episodes and (done % spec.checkpoint_every == 0 or boundary.pending):
            checkpoint.save(spec.run_dir, {
                "identity": ident, "next_step": done, "cumulative": cumulative,
                "wall_s": row["wall_s"], "policy": policy.state_dict(),
                "optimizer": opt.state_dict(), "streams": streams.state(), "rows": rows,
            }, pause_s=spec.debug.get("checkpoint_pause", 0.0))
            heartbeat(checkpoint_step=done)
            last_beat = time.time()
            if boundary.pending:
                print(f"[{label}] checkpoint at step {done} ({boundary.why})", flush=True)
            boundary.after_checkpoint()
        elif time.time() - last_beat > HEARTBEAT_S:
            heartbeat()
            last_beat = time.time()
