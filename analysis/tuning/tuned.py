"""Tuned beside untuned: every `<algo>_tuned` in the results table (written by
hydra/sweeper=optuna, rerun with fresh seeds) next to the untuned `<algo>` on the same
task and number of episodes; a section of the reproduction report when such runs exist.

Untuned means: the algorithm's conf/algo yaml values, and not a tuning trial (those are
labelled `experiment=tuned_terminal` and are ordinary runs of `<algo>` with other values).
Where several untuned configurations fit, the one with the most seeds is used.
"""
from __future__ import annotations

import pandas as pd

from .. import stats
from ..configs import algo_defaults, default_lr, pick_config

SUFFIX = "_tuned"
TUNING_LABELS = ("tuned_terminal",)
NOTE = ("Final error (%, seed mean ± SE at the last step) of each best configuration found by "
        "`hydra/sweeper=optuna` (algorithm `<algo>_tuned`) beside the untuned algorithm on the "
        "same task and episodes. Both rerun with fresh seeds; see each tuned yaml's header for "
        "its study and budget.")


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _final(rows: pd.DataFrame) -> str:
    f = stats.final_stats(stats.seed_curves(rows)) if not rows.empty else None
    return "not run" if f is None else f"{100 * f.mean:.3g} ± {100 * f.se:.2g} (n={f.n_seeds})"


def untuned(df: pd.DataFrame, algo: str) -> pd.Series:
    """Rows of `algo` at its yaml values (and its optimizer's learning rate) that are not
    tuning trials."""
    mask = df["algo.name"] == algo
    if "experiment" in df.columns:
        mask &= ~df["experiment"].isin(TUNING_LABELS)
    for key, value in algo_defaults(algo).items():
        col = f"algo.{key}"
        if key not in ("name", "impl") and col in df.columns:
            mask &= df[col].isna() | (df[col] == value)
    if {"optim.name", "optim.lr"} <= set(df.columns):
        lr = df["optim.name"].map(lambda o: default_lr(str(o)))
        mask &= lr.isna() | df["optim.lr"].isna() | (df["optim.lr"] == lr)
    return mask


def lines(df: pd.DataFrame) -> list[dict]:
    """One line per (tuned algorithm, task, episodes) with results; [] if none."""
    if df.empty or "algo.name" not in df.columns:
        return []
    out = []
    tuned_names = sorted(n for n in df["algo.name"].dropna().unique() if str(n).endswith(SUFFIX))
    for name in tuned_names:
        base = name[: -len(SUFFIX)]
        mine = df[df["algo.name"] == name]
        for (task, episodes), rows in mine.groupby(["task.name", "task.episodes"], sort=True):
            rows = pick_config(rows)
            same = (df["task.name"] == task) & (df["task.episodes"] == episodes)
            ref = pick_config(df[same & untuned(df, base)])
            # The tuned values: the knobs where the tuned config differs from the untuned one.
            mine_cfg = rows.iloc[0]
            ref_cfg = ref.iloc[0] if not ref.empty else pd.Series(dtype=object)
            changed = [f"{c}={_fmt(mine_cfg[c])}" for c in rows.columns
                       if (c.startswith("algo.") or c == "optim.lr")
                       and c not in ("algo.name", "algo.impl") and pd.notna(mine_cfg[c])
                       and not (c in ref_cfg and ref_cfg[c] == mine_cfg[c])]
            out.append({"task": str(task), "episodes": str(episodes), "algorithm": base,
                        "tuned": _final(rows), "untuned": _final(ref),
                        "tuned values": ", ".join(changed)})
    return out
