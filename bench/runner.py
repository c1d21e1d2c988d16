"""One run: build a task, an algorithm and an optimizer from the config, then loop
rollout -> epochs of (log-probs, loss, step) -> metrics. The only module that knows
both tasks and algorithms.
"""
from __future__ import annotations

import dataclasses
import math
import os
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
from bench import checkpoint, io
from bench.batch import GROUP_NEEDS, NEEDS, Batch, Request
from bench.identity import config_hash, flatten, identity, run_dir
from bench.optim import build_optimizer, check_optimizer
from bench.registry import UnknownName, load_plugins
from bench.rng import Streams
from tasks import TASKS

# Every run writes these columns (NaN where a method or task does not define one), so
# tables from different algorithms concatenate into one tidy schema.
METRIC_COLUMNS = (
    "step", "error", "reward_mean", "loss", "grad_norm", "param_change",
    "all_fail_frac", "zero_var_frac", "success_prompt_frac", "clip_frac", "kl",
    "q_success", "q_fail", "absA_success", "absA_fail", "misalignment", "train_error",
    "test_error", "rollouts", "wall_s",
)
ZERO_VAR_STD = 1e-6  # SPEC 6
MATCH_MODES = ("prompts", "interactions")
HEARTBEAT_S = 30.0  # summary.json's heartbeat is refreshed at least this often


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
    """What the algorithm consumes (bench.batch.NEEDS); a plug-in that does not say is a
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


def build(cfg: dict[str, Any], explicit: frozenset[str] = frozenset()) -> RunSpec:
    """Validate everything and resolve the run; creates nothing on disk. `explicit` holds
    the config keys the user set on the command line."""
    load_plugins(list(cfg.get("plugins") or []))
    task_impl, task = _instantiate(TASKS, cfg["task"], "task")
    algo_impl, algo = _instantiate(ALGORITHMS, cfg["algo"], "algo")
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
    seed = cfg.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    for key in ("log_every", "checkpoint_every"):
        value = cfg.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    checkpoint_every = cfg.get("checkpoint_every", 250)
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
        labels={"experiment": cfg.get("experiment")}, device=str(cfg.get("device", "cpu")),
        threads=int(cfg.get("threads", 0)), log_every=int(cfg.get("log_every", 50)),
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


def _fmt_eta(seconds: float) -> str:
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
    rate = (done - resumed_at) / max(elapsed, 1e-9)
    test = f" last test error {last['error']:.4f}" if evaluates else ""
    print(f"[{label}] step {done}/{episodes} error {row['error']:.4f}{test} "
          f"reward {row['reward_mean']:.4f} loss {row['loss']:.4f} | "
          f"{rate:.2f} ep/s | ETA {_fmt_eta((episodes - done) / max(rate, 1e-9))}", flush=True)


def run(spec: RunSpec) -> dict[str, Any]:
    """Train one (config, seed) into spec.run_dir and return its summary. A completed run
    is skipped (unless spec.force); an interrupted one resumes from its checkpoint; a
    failure is recorded (status, reason, partial metrics) and returned, not raised."""
    summary_path = spec.run_dir / "summary.json"
    prev = io.read_json(summary_path) if summary_path.exists() else {}
    if prev.get("status") == "completed" and not spec.force:
        print(f"[skip] {spec.run_dir} already completed (force=true re-runs it)", flush=True)
        return prev
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    if spec.force:
        checkpoint.clear(spec.run_dir)
    checkpoint.clear_stale_temps(spec.run_dir)
    # threads=0: what the scheduler granted (a SLURM job's CPUs), else torch's default.
    threads = spec.threads or int(os.environ.get("SLURM_CPUS_PER_TASK", "0"))
    if threads > 0:
        torch.set_num_threads(threads)
    label = f"{spec.task.name}/{spec.algo_name} {spec.config_hash} seed={spec.seed}"
    attempts = (0 if spec.force else prev.get("attempts", 0)) + 1
    base = {"config_hash": spec.config_hash, "run_dir": str(spec.run_dir), "seed": spec.seed,
            "task": spec.task.name, "algo": spec.algo_name, "attempts": attempts,
            "started_at": prev.get("started_at", time.time()) if not spec.force else time.time(),
            "versions": io.package_versions(), "git_commit": io.git_commit(),
            "threads": torch.get_num_threads(), "device": spec.device,
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
            "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"), **spec.effective}
    io.write_json(spec.run_dir / "config.json", {"seed": spec.seed, **spec.config})

    def heartbeat(**extra) -> None:
        io.write_json(summary_path, {**base, "status": "running", "reason": None,
                                     "heartbeat": time.time(), **extra})

    heartbeat()
    for note in spec.notes:
        print(f"[{label}] {note}", flush=True)
    rows: list[dict[str, Any]] = []
    status, reason = "completed", None
    try:
        streams = Streams.from_seed(spec.seed, spec.device)
        policy = spec.task.make_policy(streams.init).to(spec.device)
        opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
        episodes = spec.task.episodes
        # Tasks with held-out evaluation log one row per evaluation, step = updates done
        # (the first before any update); the others one row per episode, step = its
        # 0-based index, error measured on its rollouts before its update (SPEC 3.1).
        eval_every = getattr(spec.task, "eval_every", 0)
        start, cumulative, wall_before = 0, 0, 0.0
        state = checkpoint.load(spec.run_dir)
        if state is not None:
            policy.load_state_dict(state["policy"])
            opt.load_state_dict(state["optimizer"])
            streams.load_state(state["streams"])
            rows, start = state["rows"], state["next_step"]
            cumulative, wall_before = state["cumulative"], state["wall_s"]
            print(f"[{label}] resumed from checkpoint at step {start} (attempt {attempts})", flush=True)
        elif eval_every:
            rows.append({"step": 0, "rollouts": 0, "wall_s": 0.0, **spec.task.evaluate(policy)})
        t0, last_beat = time.perf_counter(), time.time()
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
            if done % spec.log_every == 0 or done == episodes:
                _progress(label, done, episodes, row, rows[-1], bool(eval_every),
                          time.perf_counter() - t0, start)
            if spec.debug.get("sleep"):
                time.sleep(spec.debug["sleep"])
            if done % spec.checkpoint_every == 0 and done < episodes:
                checkpoint.save(spec.run_dir, {
                    "next_step": done, "cumulative": cumulative, "wall_s": row["wall_s"],
                    "policy": policy.state_dict(), "optimizer": opt.state_dict(),
                    "streams": streams.state(), "rows": rows,
                }, pause_s=spec.debug.get("checkpoint_pause", 0.0))
                heartbeat(checkpoint_step=done)
                last_beat = time.time()
            elif time.time() - last_beat > HEARTBEAT_S:
                heartbeat()
                last_beat = time.time()
    except Exception as e:
        status, reason = "failed", f"{type(e).__name__}: {e}"
    except BaseException as e:  # interrupted (Ctrl-C, a signal): resumable from the checkpoint
        status, reason = "interrupted", type(e).__name__
        raise
    finally:
        extra = [k for r in rows for k in r if k not in METRIC_COLUMNS]
        df = pd.DataFrame(rows, columns=list(dict.fromkeys([*METRIC_COLUMNS, *extra])))
        columns = {"config_hash": spec.config_hash, "seed": spec.seed,
                   **flatten(spec.config), **spec.effective, **spec.labels}
        for key, value in columns.items():
            df[key] = value
        df["partial"] = status != "completed"
        io.write_parquet(spec.run_dir / "metrics.parquet", df)
        final = {k: v for k, v in (rows[-1] if rows else {}).items() if isinstance(v, (int, float))}
        summary = {**base, "status": status, "reason": reason, "final": final,
                   "rows": len(rows), "finished_at": time.time(),
                   "duration_s": time.time() - base["started_at"]}
        io.write_json(summary_path, summary)  # last: it is what says "completed"
        if status == "completed":
            checkpoint.clear(spec.run_dir)
        else:
            print(f"[{label}] {status.upper()}: {reason}", file=sys.stderr, flush=True)
    return summary
