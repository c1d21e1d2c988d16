"""A study's plan, what a trial's runs amount to (its objective or why it has none), and
the best trial written as a config file. Plain data and functions: no optuna, no Hydra
here. (Hydra's plugin scan executes optuna_sweeper.py outside sys.modules, where a
dataclass cannot resolve its annotations; modules named _* are not scanned.)"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tpo_bench.contract import io, schema

OBJECTIVES = ("final", "auc")
# The runner records a NaN/inf loss as a failed run with this reason (bench.runner.run).


@dataclass
class Outcome:
    kind: str  # "complete"; "diverged" (-> PRUNED); "failed", "invalid" (refused config) (-> FAIL)
    value: float | None = None
    per_seed: dict[int, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)


def curve_value(metrics: Path, objective: str, final_window: int) -> float:
    """final: mean error over the last `final_window` logged steps (1: the last step, as the
    paper reports); auc: mean error over every logged step, i.e. the area under the error
    curve divided by its length (rewards learning fast, not only ending low)."""
    import pandas as pd  # here: Hydra imports this package on every `python -m bench`

    err = pd.read_parquet(metrics, columns=["step", "error"]).sort_values("step")["error"]
    err = err.dropna()
    if err.empty:
        raise ValueError(f"{metrics}: no error values")
    value = float(err.tail(final_window).mean() if objective == "final" else err.mean())
    if not math.isfinite(value):
        raise ValueError(f"{metrics}: non-finite {objective} {value}")
    return value


def score(seed_returns: list[tuple[int, Any]], objective: str, final_window: int) -> Outcome:
    """Outcome of one trial from (seed, job result) pairs; a job result is the dict a bench
    job returns, or the exception the job raised. Any non-divergence failure makes the
    trial failed (a harness problem must not pass for a bad configuration); otherwise any
    diverged seed prunes it (the configuration is unstable); otherwise the mean."""
    out = Outcome("complete")
    diverged = failed = False
    for seed, result in seed_returns:
        if isinstance(result, BaseException):
            failed = True
            out.reasons.append(f"seed {seed}: job raised {type(result).__name__}: {result}")
            continue
        for run in result.get("runs", []):
            out.run_dirs.append(str(run["run_dir"]))
            if run["status"] != "completed":
                reason = str(run.get("reason"))
                unstable = run.get("error_kind") == schema.DIVERGED  # a non-finite loss
                diverged |= unstable
                failed |= not unstable
                out.reasons.append(f"seed {seed}: {run['status']}: {reason}")
                continue
            try:
                out.per_seed[seed] = curve_value(Path(run["run_dir"]) / schema.METRICS,
                                                 objective, final_window)
            except Exception as e:  # unreadable or empty metrics: the run is not usable
                failed = True
                out.reasons.append(f"seed {seed}: {type(e).__name__}: {e}")
    if failed or not (out.per_seed or diverged):
        out.kind = "failed"
    elif diverged:
        out.kind = "diverged"
    else:
        out.value = sum(out.per_seed.values()) / len(out.per_seed)
    return out


def tuned_config(algo_section: dict, params: dict[str, Any], name: str) -> dict:
    """The body of `<algo>_tuned.yaml`: the full algo section (every field, the tuned ones
    replaced) under a new name and the same implementation, plus each tuned key outside
    `algo` (optim.lr, ...) at its dotted place. The file is @package _global_ so that
    `algo=<name>` can also set the learning rate."""
    algo = {"name": name, "impl": algo_section.get("impl") or algo_section["name"],
            **{k: v for k, v in algo_section.items() if k not in ("name", "impl")}}
    body: dict = {"algo": algo}
    for key, value in params.items():
        head, *rest = key.split(".")
        if head == "algo" and len(rest) == 1:
            algo[rest[0]] = value
            continue
        node = body
        for part in key.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[key.split(".")[-1]] = value
    return body


def write_best(path: Path, body: dict, header: list[str]) -> None:
    """Write atomically (a reader never sees half a config)."""
    text = "# @package _global_\n" + "".join(f"# {line}\n" for line in header)
    io.write_text(path, text + yaml.safe_dump(body, sort_keys=False))


@dataclass
class Plan:
    """One study, resolved and validated before anything runs."""
    name: str
    overrides: list[str]  # fixed overrides of every job of the study (no seed)
    task: str
    algo: str
    episodes: Any
    seeds: list[int]
    space: dict
    space_source: str
    storage: str
    best_path: Path
    algo_section: dict
    fixed_tuned: list[str]  # space keys left out because the command line fixes them
    base_hash: str  # run identity of the untuned base config (task, optimizer, matching, ...)
    objective: dict  # {"objective": ..., "final_window": ...}
    lock_path: Path | None = None  # held by the one sweep that runs this study

    @staticmethod
    def lock_for(storage: str, name: str, output_root: Path) -> Path:
        """`<name>.lock` beside a SQLite database, else under output_root/.optuna/ (sweeps
        sharing another storage must then share output_root for the lock to hold)."""
        if storage.startswith("sqlite:///"):
            return Path(storage.removeprefix("sqlite:///")).parent / f"{name}.lock"
        return output_root.absolute() / ".optuna" / f"{name}.lock"

    @property
    def setup(self) -> dict:
        """What must not change when the study resumes (checked against the stored one):
        trial values are only comparable, and the budget only equal, under one setup."""
        return {"task": self.task, "algo": self.algo, "episodes": self.episodes,
                "seeds": self.seeds, "space": self.space, "base_hash": self.base_hash,
                **self.objective}
