"""Experiment tracking (config group `logger=`): every metrics row a run records also
goes to TensorBoard, Weights & Biases or MLflow, to watch runs live. The run's
metrics.parquet stays the record: a logger that fails warns once and is dropped, and the
run goes on. Each seed is its own tracked run (a seed-batched job's too), grouped by
config hash so a tracker's UI aggregates the seeds of one config.

    none         nothing (the default)
    tensorboard  event files in <run dir>/tensorboard/
    wandb        offline into <run dir>/wandb/ unless W&B is configured (WANDB_MODE, an
                 API key in WANDB_API_KEY or ~/.netrc): config, seed and group as W&B's
    mlflow       MLFLOW_TRACKING_URI, else a file store in <output_root>/mlruns
"""
from __future__ import annotations

import importlib.util
import math
import netrc
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .config import LOGGERS, ConfigError, check_fields, did_you_mean
from ..contract.identity import flatten


PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def logger_config(node: dict | None) -> dict[str, Any]:
    """The `logger` section checked against its dataclass; refuses a logger whose package
    is not installed (the `track` extra), before any run starts."""
    node = dict(node or {"name": "none"})
    name = node.get("name", "none")
    if name not in LOGGERS:
        raise ConfigError(f"logger={name!r} is not one of {', '.join(LOGGERS)}{did_you_mean(str(name), LOGGERS)}")
    cfg = LOGGERS[name](**check_fields("logger.", LOGGERS[name], node, f"logger {name!r}"))
    sub = getattr(cfg, "subdir", None)
    if sub is not None and (not isinstance(sub, str) or not sub.strip() or Path(sub).is_absolute()
                            or ".." in Path(sub).parts):
        raise ConfigError(f"logger.subdir={sub!r} must be a folder inside the run directory "
                          "(a relative path without '..')")
    package = PACKAGES.get(name)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(f"logger={name} needs the {package} package: pip install 'tpo-bench[track]'")
    return asdict(cfg)


def wandb_mode(configured: str | None) -> str:
    """W&B's mode: as set, else WANDB_MODE, else online where an API key is configured
    (WANDB_API_KEY or a ~/.netrc entry for W&B's host), else offline."""
    if configured or os.environ.get("WANDB_MODE"):
        return configured or os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        hosts = netrc.netrc().hosts
    except (OSError, netrc.NetrcParseError):
        hosts = {}
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1]
    return "online" if host in hosts else "offline"


def numbers(row: dict[str, Any]) -> dict[str, float]:
    """A row's finite numeric metrics (step aside), what a tracker plots."""
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


class Tracker:
    """One run's tracker: `log(row)` per recorded row, `close(status)` at the end. Any
    exception in the backend is caught: the first one warns (once per logger and
    process) and the tracker stops."""

    warned: set[str] = set()

    def __init__(self, spec, attempt: int):
        self.name = spec.logger.get("name", "none")
        self.label = f"{spec.task.name}/{spec.algo_name} {spec.config_hash} seed={spec.run.seed}"
        self.backend = None
        if self.name != "none":
            self._safely("start", lambda: setattr(self, "backend", BACKENDS[self.name](spec, attempt)))

    def _safely(self, what: str, call) -> None:
        try:
            call()
        except Exception as e:  # a tracker never fails the run
            self.backend = None
            if self.name not in Tracker.warned:
                Tracker.warned.add(self.name)
                print(f"[{self.label}] warning: logger={self.name} failed at {what} "
                      f"({type(e).__name__}: {e}); it is off for this run, the parquet record "
                      f"is unaffected", file=sys.stderr, flush=True)

    def log(self, row: dict[str, Any]) -> None:
        if self.backend is not None:
            backend = self.backend
            self._safely(f"step {row.get('step')}", lambda: backend.log(numbers(row), int(row["step"])))

    def close(self, status: str) -> None:
        if self.backend is not None:
            backend = self.backend
            self._safely("close", lambda: backend.close(status))
            self.backend = None


def _identity(spec) -> dict[str, Any]:
    return {"seed": spec.run.seed, "config_hash": spec.config_hash, "task": spec.task.name,
            "algo": spec.algo_name, **flatten(spec.config)}


class _TensorBoard:
    def __init__(self, spec, attempt: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(spec.run_dir) / spec.logger["subdir"]))
        self.writer.add_text("config", "\n".join(f"{k}: {v}" for k, v in _identity(spec).items()), 0)

    def log(self, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)

    def close(self, status: str) -> None:
        self.writer.close()


class _Wandb:
    def __init__(self, spec, attempt: int):
        import wandb

        cfg = spec.logger
        self.run = wandb.init(
            project=cfg["project"], entity=cfg["entity"], mode=wandb_mode(cfg["mode"]),
            dir=str(spec.run_dir), group=f"{spec.task.name}/{spec.algo_name}/{spec.config_hash}",
            job_type=spec.algo_name, name=f"{spec.task.name}/{spec.algo_name} seed={spec.run.seed}",
            config=_identity(spec), reinit="create_new",
            settings=wandb.Settings(console="off", silent=True))

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "completed" else 1)


class _Mlflow:
    def __init__(self, spec, attempt: int):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        cfg = spec.logger
        uri = cfg["tracking_uri"] or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # MLflow 3 asks for this opt-in before it writes a file store
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = Path(spec.run.output_root).absolute().joinpath("mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(cfg["experiment"])
        if experiment is None:
            try:
                experiment_id = self.client.create_experiment(cfg["experiment"])
            except Exception:  # another run created it meanwhile
                experiment_id = self.client.get_experiment_by_name(cfg["experiment"]).experiment_id
        else:
            experiment_id = experiment.experiment_id
        group = f"{spec.task.name}/{spec.algo_name}/{spec.config_hash}"
        self.run_id = self.client.create_run(
            experiment_id, run_name=f"{spec.task.name}/{spec.algo_name} seed={spec.run.seed}",
            tags={"group": group, "seed": str(spec.run.seed), "config_hash": spec.config_hash,
                  "run_dir": str(spec.run_dir), "attempt": str(attempt)}).info.run_id
        params = [Param(k, str(v)[:500]) for k, v in _identity(spec).items()]
        self.client.log_batch(self.run_id, params=params)

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if status == "completed" else "FAILED")


BACKENDS = {"tensorboard": _TensorBoard, "wandb": _Wandb, "mlflow": _Mlflow}
