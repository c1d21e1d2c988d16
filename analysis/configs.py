"""The configurations behind a results table: the conf/ defaults a run is compared with
(an algorithm's yaml values, an optimizer's learning rate), and one configuration out of
several that fit the same setting. Shared by the paper's selection
(analysis/paper/experiments.py) and the tuning reports (analysis/tuning/tuned.py).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

# conf/ beside analysis/: the checkout's, or the one a non-editable install puts there.
CONF = Path(__file__).resolve().parents[1] / "conf"


@lru_cache(maxsize=None)
def algo_defaults(algo: str) -> dict:
    """conf/algo/<algo>.yaml's values, the reference for held keys ({} if unknown)."""
    import yaml  # omegaconf's dependency; only needed here

    path = CONF / "algo" / f"{algo}.yaml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text()) or {}


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
