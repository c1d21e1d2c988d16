"""The configurations behind a results table: the conf/ defaults a run is compared with
(an algorithm's yaml values, an optimizer's learning rate), and one configuration out of
several that fit the same setting. Shared by the paper's selection
(analysis/paper/experiments.py) and the tuning reports (analysis/tuning/tuned.py).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

# The short keys filters use (`--where H=10`, the paper's experiments) and their columns.
ALIASES = {
    "task": "task.impl", "H": "task.sequence_length", "V": "task.vocab_size",
    "B": "task.batch_size", "reward": "task.reward", "target": "task.target",
    "D": "task.delay", "algo": "algo.name", "K": "algo.k", "epochs": "algo.epochs",
    "eta": "algo.eta", "match": "match", "holdout": "task.holdout",
    "surprisal": "algo.surprisal",
}

# conf/ beside analysis/: the checkout's, or the one a non-editable install puts there.
CONF = Path(__file__).resolve().parents[1] / "conf"


def _preset(group: str, name: str) -> dict:
    """conf/<group>/<name>.yaml's values over what it extends: its base preset, or the
    defaults of the dataclass its schema entry names ({} if there is no such preset)."""
    import yaml  # omegaconf's dependency; only needed here

    path = CONF / group / f"{name}.yaml"
    if not path.is_file():
        return {}
    own = yaml.safe_load(path.read_text()) or {}
    base: dict = {}
    for entry in own.pop("defaults", None) or []:
        if isinstance(entry, dict) and f"/schema/{group}@_here_" in entry:
            base = _dataclass_defaults(group, entry[f"/schema/{group}@_here_"])
        elif isinstance(entry, str) and not entry.startswith("_"):
            base = _preset(group, entry)
    return {**base, **own}


def _dataclass_defaults(group: str, impl: str) -> dict:
    import dataclasses

    from tpo_bench.contract.registry import ALGORITHMS, TASKS

    cls = {"algo": ALGORITHMS, "task": TASKS}[group].get(impl)
    return {"impl": impl, **{f.name: f.default for f in dataclasses.fields(cls)
                             if f.init and f.default is not dataclasses.MISSING}}


@lru_cache(maxsize=None)
def algo_defaults(algo: str) -> dict:
    """The values conf/algo/<algo>.yaml runs with (its own over its dataclass's defaults),
    the reference for held keys ({} if unknown)."""
    return _preset("algo", algo)


@lru_cache(maxsize=None)
def experiment_task(name: str) -> dict:
    """The task values conf/experiment/<name>.yaml runs: the task preset its sweep names
    (one), under the experiment's own `task` block."""
    import yaml

    exp = yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())
    preset = exp["hydra"]["sweeper"]["params"]["task"]
    return {**_preset("task", preset), **(exp.get("task") or {})}


@lru_cache(maxsize=None)
def default_lr(optim: str):
    """conf/optim/<optim>.yaml's learning rate (None if unknown)."""
    import yaml

    path = CONF / "optim" / f"{optim}.yaml"
    return (yaml.safe_load(path.read_text()) or {}).get("lr") if path.is_file() else None


def pick_config(rows: pd.DataFrame) -> pd.DataFrame:
    """One config hash out of several that fit (say a shrunk and a full run of the same
    setting): the one with the most seeds, then the longest log, then the first hash."""
    if rows.empty or rows["config_hash"].nunique() == 1:
        return rows
    g = rows.groupby("config_hash")
    rank = pd.DataFrame({"seeds": g["seed"].nunique(), "steps": g["step"].max()})
    best = rank.sort_values(["seeds", "steps"], ascending=False, kind="stable").index[0]
    return rows[rows["config_hash"] == best]
