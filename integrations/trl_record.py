"""A TRL callback that records a training curve as a harness run directory.

    <output_root>/<task>/<algo>/<config hash>/seed=<n>/{config.json, summary.json, metrics.parquet}

(contract.schema's layout), so collect and plot read a TRL-trained run beside the
harness's own. One row per optimizer step, step = updates before it (0-based, as the
runner counts episodes): TRL must log every step (`logging_steps=1`, refused otherwise).
Columns are contract.schema.METRIC_COLUMNS, NaN where TRL reports nothing; a step that
reuses a batch (num_iterations > 1) carries its generation's reward and length; `error` is
1 - reward_mean (scores in [0, 1]); `rollouts` counts the completions sampled so far. The
hashed config: the task section (`impl: trl`, the model, the TRL settings that change what
is trained, the caller's extras), the algorithm section (registered name and fields, k and
epochs as TRL ran them; `trl_<loss_type>` for a plain GRPOTrainer), the optimizer; the seed
beside. A run that stops early is recorded `interrupted`; one whose training raised is left
`running` (its heartbeat goes stale: collect calls it incomplete).
"""
from __future__ import annotations

import dataclasses
import enum
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from ..contract import io, schema
from ..contract.identity import config_hash, flatten

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover
    raise ImportError(f"integrations.trl_record needs transformers ({e}); pip install 'tpo-bench[trl]'") from e

# TRL's log key -> the harness's column: at every step (the loss's) and at the steps that
# generated (the batch's; a reused batch keeps the values of the generation it came from)
FROM_TRL = {"loss": "loss", "grad_norm": "grad_norm", "entropy": "entropy"}
FROM_GENERATION = {"reward": "reward_mean", "completions/mean_length": "response_length"}
FROM_ALGORITHM = ("q_success", "q_fail", "clip_frac", "absA_success", "absA_fail", "kl_ref")
# TRL settings that change what a run trains (the rest: logging, paths, devices)
TRAINING_KEYS = ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "steps_per_generation", "num_iterations", "max_completion_length", "temperature",
                 "top_p", "top_k", "beta", "max_steps", "max_grad_norm", "learning_rate",
                 "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "lr_scheduler_type",
                 "warmup_steps", "loss_type", "scale_rewards", "epsilon")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _plain(value: Any) -> Any:
    """A setting as a config value: an enum by its value (`adamw_torch_fused`), other
    objects by their text."""
    if isinstance(value, enum.Enum):
        value = value.value
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def run_config(args, model_name: str, algorithm=None, task: dict | None = None) -> dict[str, Any]:
    """The run's config, as the harness nests it (task / algo / optim; the seed beside).
    The algorithm's group size and epochs are TRL's `num_generations` and
    `num_iterations`, which are what the run used."""
    trl = {k: _plain(getattr(args, k)) for k in TRAINING_KEYS if hasattr(args, k)}
    task_section = {"impl": "trl", "model": model_name, "episodes": int(args.max_steps),
                    **{f"trl_{k}": v for k, v in trl.items()}, **(task or {})}
    if algorithm is not None:
        algo = {"impl": getattr(algorithm, "registered_name", type(algorithm).__name__),
                **dataclasses.asdict(algorithm)}
        used = {"k": int(args.num_generations), "epochs": int(args.num_iterations)}
        algo.update({k: v for k, v in used.items() if k in algo})
    else:  # a plain GRPOTrainer: TRL's own loss
        algo = {"impl": f"trl_{getattr(args, 'loss_type', 'grpo')}"}
    return {"task": task_section, "algo": algo,
            "optim": {"name": _plain(getattr(args, "optim", "adamw")), "lr": float(args.learning_rate)},
            "seed": int(args.seed)}


class HarnessRecorder(TrainerCallback):
    """HarnessRecorder(output_root, task_name, algo_name, model_name, algorithm=...).

    `task_name` and `algo_name` are the labels in the path and the legends (a figure per
    task name: give TRL runs the name of the harness task they stand beside);
    `algorithm` the harness algorithm a ZooGRPOTrainer trains with (None: a plain
    GRPOTrainer, recorded as trl_<loss_type>); `task`: extra config keys for the task
    section (the data set, its size)."""

    def __init__(self, output_root, task_name: str, algo_name: str, model_name: str,
                 algorithm=None, task: dict | None = None):
        self.output_root, self.task_name, self.algo_name = Path(output_root), task_name, algo_name
        self.model_name, self.algorithm, self.task = model_name, algorithm, task or {}
        self.rows: list[dict[str, Any]] = []
        self.path: Path | None = None
        self.config: dict[str, Any] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if args.logging_steps != 1:
            raise ValueError(f"logging_steps={args.logging_steps}: the harness records one row per "
                             "optimizer step; set logging_steps=1")
        if args.max_steps is None or args.max_steps <= 0:
            raise ValueError("max_steps must be set: a run's length (task.episodes) is part of its config")
        self.config = run_config(args, self.model_name, self.algorithm, self.task)
        self.hash = config_hash(self.config)
        self.path = schema.run_dir(self.output_root, self.task_name, self.algo_name, self.hash, int(args.seed))
        self.path.mkdir(parents=True, exist_ok=True)
        io.write_json(self.path / schema.CONFIG, {**self.config, "task": {**self.config["task"], "name": self.task_name},
                                                  "algo": {**self.config["algo"], "name": self.algo_name}})
        self.started = time.time()
        self.t0 = time.perf_counter()
        # TRL generates at every (steps_per_generation x num_iterations)-th micro-step, a batch
        # of per_device_train_batch_size x steps_per_generation completions on each process
        spg = getattr(args, "steps_per_generation", None) or 1
        self.generate_every = spg * getattr(args, "num_iterations", 1)
        self.per_generation = args.per_device_train_batch_size * spg * args.world_size
        self.rows = []
        self.generation = {col: math.nan for col in FROM_GENERATION.values()}
        self._summary(schema.RUNNING, heartbeat=time.time())

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" not in logs:  # the end-of-training summary TRL logs without a step's numbers
            return
        if "reward" in logs:  # this step generated: its batch's numbers
            self.generation = {col: _number(logs.get(key)) for key, col in FROM_GENERATION.items()}
        row = {c: math.nan for c in schema.METRIC_COLUMNS}
        row.update({col: _number(logs.get(key)) for key, col in FROM_TRL.items()})
        row.update(self.generation)
        row.update({c: _number(logs.get(f"zoo/{c}")) for c in FROM_ALGORITHM})
        step = int(state.global_step) - 1
        generations = -(-(step + 1) * args.gradient_accumulation_steps // self.generate_every)
        row.update(step=step, error=1.0 - row["reward_mean"], rollouts=generations * self.per_generation,
                   wall_s=time.perf_counter() - self.t0)
        self.rows.append(row)

    def on_train_end(self, args, state, control, **kwargs):
        steps = [r["step"] for r in self.rows]
        status = schema.COMPLETED if steps == list(range(int(args.max_steps))) else schema.INTERRUPTED
        df = pd.DataFrame(self.rows, columns=list(schema.METRIC_COLUMNS))
        labels = {"task.name": self.task_name, "algo.name": self.algo_name}
        for key, value in {"config_hash": self.hash, "seed": int(args.seed), **flatten(self.config),
                           **labels}.items():
            df[key] = value
        df["partial"] = status != schema.COMPLETED
        io.write_parquet(self.path / schema.METRICS, df)
        final = {k: v for k, v in (self.rows[-1] if self.rows else {}).items() if isinstance(v, (int, float))}
        self._summary(status, rows=len(self.rows), final=final, finished_at=time.time(),
                      duration_s=time.time() - self.started,
                      reason=None if status == schema.COMPLETED else
                      f"{len(steps)} of {args.max_steps} steps recorded")

    def _summary(self, status: str, **extra):
        io.write_json(self.path / schema.SUMMARY, {
            "status": status, "reason": None, "config_hash": self.hash, "seed": int(self.config["seed"]),
            "git_commit": io.git_commit(), "started_at": self.started, "trainer": "trl",
            "model": self.model_name, **extra})
