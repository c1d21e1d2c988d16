"""From a resolved config to a RunSpec: every check on the input, the implementations
looked up, the matching arithmetic, and the run's identity. Creates nothing on disk, so a
sweep can refuse a bad job before any job starts.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..algorithms import ALGORITHMS
from .config import ConfigError, RunConfig, check_fields, identity_keys, run_config
from .fingerprint import code_fingerprint
from ..contract.identity import config_hash, legacy_hash
from .optim import check_optimizer
from .tracking import logger_config
from ..contract import schema
from ..contract.batch import GROUP_NEEDS, NEEDS, Request, by_seed_axis
from ..contract.registry import UnknownName, load_plugins
from ..tasks import TASKS

@dataclass(frozen=True)
class RunSpec:
    """One (config, seed) resolved: what build() found and what it derived. The top-level
    keys stay in `run`, as checked (their defaults are RunConfig's)."""
    run: RunConfig
    """the top level: seed, device, threads, force, output_root, ..."""
    task: Any
    algo: Any
    algo_name: str
    optim_name: str
    optim_hparams: dict[str, float]
    config: dict[str, Any]
    """resolved scientific config (what the hash and the parquet columns carry)"""
    config_hash: str
    run_dir: Path
    request: Request
    effective: dict[str, Any] = dataclasses.field(default_factory=dict)
    """what the run really uses after matching: batch size, learning rate"""
    notes: tuple[str, ...] = ()
    """lines printed when the run starts: each rewrite, said in words"""
    rewrites: tuple[dict[str, Any], ...] = ()
    """each value build() used in place of the one given: {key, given, used, why};
    summary.json keeps them"""
    labels: dict[str, Any] = dataclasses.field(default_factory=dict)
    """columns that describe but do not identify the run (the experiment preset)"""
    code_fingerprint: str = ""
    """hash of the algorithm's and task's code (bench.fingerprint); summary.json keeps it"""
    code_files: tuple[str, ...] = ()
    """the files that hash is over"""
    narrow_fingerprint: str = ""
    """the fingerprint as runs recorded it before it covered the harness and the plugin's
    package (bench.fingerprint): what a run whose summary has no code_scope is compared to"""
    logger: dict[str, Any] = dataclasses.field(default_factory=lambda: {"name": "none"})
    """where else the metrics rows go (bench.tracking); never part of the identity"""

    @property
    def lr(self) -> float | None:
        return self.optim_hparams.get("lr")


def instantiate(registry, section: dict[str, Any], key: str):
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
    if "name" not in {f.name for f in dataclasses.fields(cls)}:
        section.pop("name")
    section = check_fields(f"{key}.", cls, section, f"{registry.kind} {impl!r}")
    try:
        obj = cls(**section)
    except (ValueError, TypeError, ImportError) as e:  # ImportError: an optional extra missing
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
    if algo.needs is not None:
        return algo.needs
    default_k = next(f.default for f in dataclasses.fields(algo) if f.name == "k")
    return "sample_group" if default_k > 1 else "sample"


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
# A run records a row per episode: more than this would not fit a table in memory.
MAX_EPISODES = 10**8
# What a run's files add below output_root at most: task, algorithm, hash and seed
# folders (plain names) and the longest file name (a temp file, a tracker's event file).
RUN_PATH_BYTES = 512
PLAIN_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_.+-]*")


def _check_plain_name(key: str, value: Any) -> None:
    if not isinstance(value, str) or not PLAIN_NAME.fullmatch(value):
        raise ConfigError(f"{key}={value!r} must be a plain name (letters, digits, '_', '+', "
                          "'-', '.'; not starting with '.' or '-'): it names a directory "
                          "under output_root")


def _check_episodes(episodes: Any) -> None:
    """task.episodes, every task's (its dataclass declares the field, this the rule)."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= MAX_EPISODES:
        raise ConfigError(f"task.episodes must be an integer from 1 to {MAX_EPISODES:,} (a run "
                          f"records a row per episode), got {episodes!r}")


def _check_device(device: Any, here: bool = True) -> None:
    """Refuse a device this machine lacks here, not as a failed run inside its directory.
    A job validated for another machine (a SLURM job submitted from a login node without
    a GPU) is checked for a device name only; the job checks the device where it runs."""
    if not here:
        if isinstance(device, str) and re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
            return
        raise ConfigError(f"device={device!r} is not a device name; valid choices: cpu, cuda, "
                          f"cuda:N, mps")
    choices = ["cpu"]
    if torch.cuda.is_available():
        choices += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        choices.append("mps")
    if device not in choices:
        raise ConfigError(f"device={device!r} is not available on this machine; valid choices: "
                          f"{', '.join(choices)}")


def build(cfg: dict[str, Any], explicit: frozenset[str] = frozenset(), here: bool = True) -> RunSpec:
    """Validate everything and resolve the run; creates nothing on disk. `explicit` holds
    the config keys the user set on the command line; `here` is false when the run will
    train on another machine (its device is not this one's to judge)."""
    rc = run_config(cfg)
    for section in ("task", "algo"):
        if cfg[section].get("name") is not None:  # a missing name is instantiate's to report
            _check_plain_name(f"{section}.name", cfg[section]["name"])
    load_plugins(list(rc.plugins))
    task_impl, task = instantiate(TASKS, cfg["task"], "task")
    algo_section = dict(cfg["algo"])
    if "algo.name" in explicit and "algo.impl" not in explicit:
        algo_section.pop("impl", None)  # an algorithm named on the command line is the one that runs
    algo_impl, algo = instantiate(ALGORITHMS, algo_section, "algo")
    _check_plain_name("task.name", task.name)  # a plug-in task may name itself
    _check_algorithm(algo, cfg["algo"]["name"])
    rewrites: list[dict[str, Any]] = []
    steps = task.steps_per_batch
    if steps is not None and algo.epochs != steps:
        if "algo.epochs" in explicit:
            raise ConfigError(f"algo.epochs={algo.epochs}: task {task.name!r} takes {steps} "
                              "optimizer step(s) per batch for every method; do not set algo.epochs")
        rewrites.append(rewrite("algo.epochs", algo.epochs, steps, f"task {task.name!r} takes "
                                f"{steps} optimizer step(s) per batch for every method"))
        algo = dataclasses.replace(algo, epochs=steps)  # recorded as what really runs
    if algo.dynamic_sampling and not (task.splits_groups and algo.level == "sequence"):
        # Like epochs above: a preset's dynamic sampling is dropped (and recorded as 0) where
        # groups cannot be replaced one by one; asked for on the command line, it is refused.
        if "algo.dynamic_sampling" in explicit:
            raise ConfigError(f"algo.dynamic_sampling={algo.dynamic_sampling}: it replaces whole "
                              f"groups by groups of fresh prompts, and task {task.name!r} (algo.level="
                              f"{algo.level}) does not give groups that can "
                              "be replaced one by one (the sequence tasks at level=sequence do); "
                              "set algo.dynamic_sampling=0")
        rewrites.append(rewrite("algo.dynamic_sampling", algo.dynamic_sampling, 0,
                                f"task {task.name!r} (algo.level={algo.level}) gives no groups "
                                "that can be replaced one by one"))
        algo = dataclasses.replace(algo, dynamic_sampling=0)
    request = Request(name=cfg["algo"]["name"], k=algo.k, level=algo.level,
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
    _check_episodes(task.episodes)
    _check_device(rc.device, here)
    _check_path_length(rc.output_root)
    _check_writable(rc.output_root)
    check_batch_seeds(rc, task)
    logger = logger_config(cfg.get("logger"))
    fingerprint, files = code_fingerprint(type(task), type(algo))
    narrow, _ = code_fingerprint(type(task), type(algo), harness=False)

    run_task, hparams, match, matched = _match(rc, cfg, task, algo, hparams)
    rewrites += matched
    config = _science(rc, cfg, task_impl, task, algo_impl, algo, optim, match)
    h = config_hash(config)
    effective = {"batch_size_effective": run_task.batch_size,
                 "lr_effective": hparams.get("lr")}
    return RunSpec(
        run=rc, task=run_task, algo=algo, algo_name=cfg["algo"]["name"], optim_name=optim["name"],
        optim_hparams=hparams, request=request, effective=effective,
        rewrites=tuple(rewrites), notes=tuple(f"{r['key']}={r['given']} runs as {r['key']}="
                                              f"{r['used']}: {r['why']}" for r in rewrites),
        labels={"experiment": rc.experiment}, config=config, config_hash=h, logger=logger,
        code_fingerprint=fingerprint, code_files=tuple(files), narrow_fingerprint=narrow,
        run_dir=_locate(rc.output_root, task.name, cfg["algo"]["name"], config, rc.seed),
    )


def _science(rc: RunConfig, cfg: dict[str, Any], task_impl: str, task, algo_impl: str, algo,
             optim: dict, match: str) -> dict[str, Any]:
    """What config.json and the table's config columns record: the dataclasses' full
    field values, defaults included, and the preset names beside them as labels (the hash
    leaves the names out: contract.identity)."""
    science = {k: getattr(rc, k) for k in identity_keys()}
    # Interaction matching is the identity for a method that already draws K candidates per
    # prompt: the run is the prompt-matched one, stored (and skipped) under one hash.
    science["match"] = match
    science["task"] = {"impl": task_impl, **identity_fields(task), "name": task.name}
    science["algo"] = {"name": cfg["algo"]["name"], "impl": algo_impl, **identity_fields(algo)}
    science["optim"] = optim
    return science


def _locate(root: str, task: str, algo: str, config: dict[str, Any], seed: int) -> Path:
    """The run's directory: where this science and seed already ran, under whatever preset
    names, else a new one under these names. A run recorded under the hash from before the
    names left it is not silently run again: the migration re-keys it first."""
    h = config_hash(config)
    found = schema.find_run(root, h, seed)
    if found is not None:
        return found
    old = schema.find_run(root, legacy_hash(config), seed)
    if old is not None:
        raise ConfigError(f"{old} is this run (task={task} algo={algo} seed={seed}) recorded under "
                          f"its legacy hash (preset names included); re-key it first: "
                          f"python -m tpo_bench.tools.migrate {root}")
    return schema.run_dir(root, task, algo, h, seed)


def check_batch_seeds(rc: RunConfig, task) -> None:
    """batch_seeds=true (bench.engine) needs a task that runs S policies as one computation."""
    if rc.batch_seeds and rc.seeds_per_job != 1 and not (
            by_seed_axis(task, "rollout", "rollout_seeds")
            and by_seed_axis(task, "logprobs", "logprobs_seeds")):
        raise ConfigError(f"batch_seeds=true trains a job's seeds_per_job seeds as one stacked "
                          f"computation, which task {task.name!r} cannot do: it has no "
                          f"rollout_seeds/logprobs_seeds of its own, or overrides rollout or "
                          f"logprobs without them (seq, mnist and tabular_* have them; "
                          f"the LLM task's model, micro-batches and reference KL are not stacked). "
                          f"Set batch_seeds=false to train its seeds one after the other")


def _check_path_length(root: str) -> None:
    """Refuse an output root whose run files' paths this file system cannot hold (the
    task, algorithm, hash and seed folders and a temp file's name below it), before any
    training: each name within NAME_MAX bytes, the whole within PATH_MAX."""
    p = Path(root).absolute()
    path_max, name_max = 4096, 255
    try:
        anchor = next(a for a in (p, *p.parents) if a.is_dir())
        path_max, name_max = os.pathconf(anchor, "PC_PATH_MAX"), os.pathconf(anchor, "PC_NAME_MAX")
    except (OSError, ValueError, StopIteration):
        pass
    if long := next((part for part in p.parts if len(os.fsencode(part)) > name_max), None):
        raise ConfigError(f"output_root: the folder name {long[:40]}... is {len(os.fsencode(long))} "
                          f"bytes; this file system allows {name_max}")
    need = len(os.fsencode(str(p))) + RUN_PATH_BYTES
    if need >= path_max:
        raise ConfigError(f"output_root is {len(os.fsencode(str(p)))} bytes long: a run's files "
                          f"below it need up to {RUN_PATH_BYTES} more and this system allows "
                          f"{path_max}; choose a shorter output_root")


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


def _match(rc: RunConfig, cfg: dict[str, Any], task, algo, hparams: dict[str, float]):
    """science §Token sequences matching modes. Interaction matching gives single-sample methods B*K
    prompts and lr * sqrt(K) on both optimizer branches; grouped and token-level
    methods run unchanged (they already see K candidates per prompt), so for them the
    effective mode is "prompts". Returns (task, hparams, effective mode, rewrites)."""
    mode, K = rc.match, rc.match_k
    name = cfg["algo"]["name"]
    if mode == "prompts":
        return task, hparams, mode, []
    if is_grouped(algo) or algo.level == "token":
        return task, hparams, "prompts", [rewrite(
            "match", mode, "prompts", f"{name} is grouped or token-level: batch size and "
            f"learning rate unchanged ({hparams}), this is the prompt-matched run")]
    if task.batch_size is None or "lr" not in hparams:
        raise ConfigError(f"match=interactions scales task.batch_size and optim.lr; task "
                          f"{task.name!r} with optim={cfg['optim']['name']} lacks one of them")
    B, lr = task.batch_size, hparams["lr"]
    matched = dataclasses.replace(task, batch_size=B * K)
    return matched, {**hparams, "lr": lr * math.sqrt(K)}, mode, [
        rewrite("task.batch_size", B, B * K, f"match=interactions: {name} gets B*K = {B}*{K} = "
                f"{B * K} prompts per episode"),
        rewrite("optim.lr", lr, lr * math.sqrt(K), f"match=interactions: lr {lr:g} * sqrt({K}) "
                f"= {lr * math.sqrt(K):g} on both optimizer branches")]


def rewrite(key: str, given: Any, used: Any, why: str) -> dict[str, Any]:
    """One value build() uses in place of the one given, and why (summary.json's
    `rewrites`, a line when the run starts)."""
    return {"key": key, "given": given, "used": used, "why": why}
