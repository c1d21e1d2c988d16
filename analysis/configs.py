"""The configurations behind a results table: the conf/ defaults a run is compared with
(an algorithm's yaml values, an optimizer's learning rate, as Hydra composes them for a
run: bench.config), and one configuration out of several that fit the same setting. Shared by the paper's selection
(analysis/paper/experiments.py) and the tuning reports (analysis/tuning/tuned.py).
"""
from __future__ import annotations

from functools import lru_cache

import pandas as pd

# The short keys filters use (`--where H=10`, the paper's experiments) and their columns.
ALIASES = {
    "task": "task.impl", "H": "task.sequence_length", "V": "task.vocab_size",
    "B": "task.batch_size", "reward": "task.reward", "target": "task.target",
    "D": "task.delay", "algo": "algo.name", "K": "algo.k", "epochs": "algo.epochs",
    "eta": "algo.eta", "match": "match", "holdout": "task.holdout",
    "surprisal": "algo.surprisal",
}

def _composed(group: str, name: str, *overrides: str) -> dict:
    """The config `python -m bench <group>=<name> OVERRIDES` runs with, as Hydra composes
    conf/ for a run (bench.config.compose); {} where conf/ has no such preset."""
    from ..bench.config import CONF, compose

    plus = "+" if group == "experiment" else ""
    if not (CONF / group / f"{name}.yaml").is_file():
        return {}
    return compose(f"{plus}{group}={name}", *overrides)


@lru_cache(maxsize=None)
def algo_defaults(algo: str) -> dict:
    """The values conf/algo/<algo>.yaml runs with (its own over its dataclass's defaults),
    the reference for held keys ({} if unknown)."""
    return _composed("algo", algo).get("algo", {})


@lru_cache(maxsize=None)
def experiment_task(name: str) -> dict:
    """The task values conf/experiment/<name>.yaml runs: the task preset its sweep names
    (one), under the experiment's own `task` block."""
    from ..bench.config import composed

    preset = composed(f"+experiment={name}", hydra=True).hydra.sweeper.params.task
    if "," in preset:
        raise ValueError(f"experiment {name} sweeps over several task presets: {preset}")
    return _composed("experiment", name, f"task={preset}")["task"]


@lru_cache(maxsize=None)
def default_lr(optim: str):
    """conf/optim/<optim>.yaml's learning rate (None if unknown)."""
    return _composed("optim", optim).get("optim", {}).get("lr")


def pick_config(rows: pd.DataFrame) -> pd.DataFrame:
    """One config hash out of several that fit (say a shrunk and a full run of the same
    setting): the one with the most seeds, then the longest log, then the first hash."""
    if rows.empty or rows["config_hash"].nunique() == 1:
        return rows
    g = rows.groupby("config_hash")
    rank = pd.DataFrame({"seeds": g["seed"].nunique(), "steps": g["step"].max()})
    best = rank.sort_values(["seeds", "steps"], ascending=False, kind="stable").index[0]
    return rows[rows["config_hash"] == best]
