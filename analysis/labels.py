"""What a figure calls its lines and says in its titles, from the table's config columns:
the keys that tell lines apart ("K=8"), the parameters every line shares ("terminal
reward, H 10, B 100"), and what the bands are ("mean ± 1 SE over 20 seeds"). Shared by
the per-task figures (analysis/plot.py) and the paper's (analysis/paper/figures.py).

One line is one (task, algorithm, config hash): GROUP; hashes are never pooled.
"""
from __future__ import annotations

from collections import Counter

import pandas as pd

from .collect import GROUP
from .style import fmt
from ..contract import schema

# Per-step metrics and row keys are never legend keys, even where they happen to be
# constant; nor is provenance: two lines differing only by commit are one configuration.
NOT_LEGEND = {*schema.METRIC_COLUMNS, *schema.ROW_KEYS, "task.name", "algo.name", "git_commit",
              "git_commits", "code_fingerprint"}
PER_ALGORITHM = ("match", "batch_size_effective", "lr_effective", "group_size_effective")

# Legend and title names of config keys, in the paper's letters where it has one.
SHORT = {"task.sequence_length": "H", "task.vocab_size": "V", "task.batch_size": "B",
         "algo.k": "K", "task.delay": "D", "batch_size_effective": "B_eff",
         "lr_effective": "lr_eff"}
REWARDS = {"terminal": "terminal reward", "bag_of_tokens": "bag-of-tokens reward",
           "sequential": "sequential reward"}
FAMILIES = {"mnist": "MNIST bandit", "tabular_single": "tabular bandit, one context",
            "tabular_multi": "tabular bandit, many contexts"}
# What a title names, in this order; a key absent from a task's table is not its parameter.
TITLE_KEYS = ("task.target", "task.sequence_length", "task.vocab_size", "task.batch_size",
              "task.num_contexts", "task.num_actions", "task.baseline", "task.delay",
              "task.holdout", "algo.k")


def config_values(df: pd.DataFrame) -> pd.DataFrame:
    """One row per line (GROUP index), one column per config key, as display strings.

    A column counts as config only if it is constant within every line; that drops
    per-step metrics the runner may add later without this file knowing about them.
    """
    groups = df.groupby(GROUP, sort=True)
    keys = []
    for col in df.columns:
        if col in NOT_LEGEND:
            continue
        try:
            if (groups[col].nunique(dropna=False) <= 1).all():
                keys.append(col)
        except TypeError:  # list-valued config: unhashable, and too long for a legend anyway
            pass
    return groups[keys].first().map(fmt)


def _differing(t: pd.DataFrame) -> list[str]:
    """The config keys that tell the lines of one task's table apart (config_values rows)."""
    # An algorithm's own knobs (algo.*) differ across algorithms by nature, and so do the
    # matching columns (under match=interactions only single-sample methods are scaled);
    # name them only where they tell lines of the same algorithm apart.
    algos = t.index.get_level_values("algo.name")
    return [c for c in t.columns if c != "algo.impl" and (
        t[c].dropna().nunique() > 1 if not (c.startswith("algo.") or c in PER_ALGORITHM)
        else (t[c].groupby(algos).nunique() > 1).any())]


def legend_labels(df: pd.DataFrame) -> dict:
    """Label per GROUP key: algo name, the config keys that differ between lines of the
    same task (ignoring lines where a key is absent, e.g. another algorithm's knob), n=seeds."""
    cfg = config_values(df)
    n_seeds = df.groupby(GROUP)["seed"].nunique()
    labels = {}
    for _, t in cfg.groupby(level="task.name"):
        differing = _differing(t)
        task_labels = {}
        for key, row in t.iterrows():
            parts = [f"{c}={row[c]}" for c in differing if pd.notna(row[c])]
            gone = (df.attrs.get("diverged") or {}).get(key[2])  # seeds collect left out as diverged
            parts.append(f"n={n_seeds[key]}" + (f", {gone} diverged" if gone else ""))
            task_labels[key] = f"{key[1]} ({', '.join(parts)})"
        # Same algo and same visible config but different hashes: tell them apart.
        counts = Counter(task_labels.values())
        for key, label in task_labels.items():
            labels[key] = label if counts[label] == 1 else f"{label[:-1]}, #{key[2][:6]})"
    return labels


def short_key(col: str) -> str:
    return SHORT.get(col) or col.removeprefix("task.").removeprefix("algo.")


def _title_value(col: str, values: list) -> str:
    v = fmt(values[0])
    if col == "task.num_contexts":
        return f"{v} contexts"
    if col == "task.num_actions":
        return f"{v} actions"
    if col == "task.holdout":
        return f"{v} images held out for validation"
    if col == "task.target":
        return f"target {v}"
    return f"{short_key(col)} {v}"


def title_items(d: pd.DataFrame, skip=()) -> list[tuple[str, str]]:
    """(column, text) of the parameters of the task(s) drawn from d: "terminal reward",
    "H 10", "B 100", "K 8"; "K per line" where lines differ (their legend then names K).
    skip: columns another part of the figure shows (a swept x axis)."""
    items = []
    impl = d["task.impl"].dropna().unique() if "task.impl" in d.columns else []
    reward = d["task.reward"].dropna().unique() if "task.reward" in d.columns else []
    if "task.reward" not in skip and len(reward) == 1:
        items.append(("task.reward", REWARDS.get(reward[0], f"{reward[0]} reward")))
    elif "task.reward" not in skip and len(reward) > 1:
        items.append(("task.reward", "reward per line"))
    elif len(impl) == 1 and impl[0] in FAMILIES:
        items.append(("task.impl", FAMILIES[impl[0]]))
    for col in TITLE_KEYS:
        if col in skip or col not in d.columns:
            continue
        values = list((d[col].fillna(0) if col == "task.holdout" else d[col]).dropna().unique())
        if col == "task.holdout" and values == [0]:  # scored on the test file: the default
            continue
        if len(values) == 1:
            items.append((col, _title_value(col, values)))
        elif len(values) > 1:
            items.append((col, f"{short_key(col)} per line"))
    return items


def se_text(ns) -> str:
    """What the bands and bars are; ns: the seed count of each line drawn."""
    ns = sorted(set(ns))
    if len(ns) == 1:
        return f"mean ± 1 SE over {ns[0]} seed{'s' * (ns[0] != 1)}"
    return "mean ± 1 SE over n seeds (n per line)"


def compact_labels(df: pd.DataFrame, per_line=()) -> dict:
    """GROUP key -> (algo, parts): legend_labels' differing config keys as "K=8", without
    the seed count (the figure says it once when every line has the same). per_line:
    columns named on every line because the title says "per line" for them."""
    cfg = config_values(df)
    out = {}
    for _, t in cfg.groupby(level="task.name"):
        keys = list(dict.fromkeys([*_differing(t), *(c for c in per_line if c in t.columns)]))
        task_parts = {}
        for key, row in t.iterrows():
            parts = [f"{short_key(c)}={row[c]}" for c in keys if pd.notna(row[c])]
            # interaction matching scales a single-sample method's batch: the title's B is not its own
            own, given = row.get("batch_size_effective"), row.get("task.batch_size")
            if (own is not None and given is not None and pd.notna(own) and pd.notna(given)
                    and own != given and "batch_size_effective" not in keys):
                parts.append(f"B_eff={own}")
            task_parts[key] = (key[1], parts)
        counts = Counter((a, tuple(p)) for a, p in task_parts.values())
        for key, (algo, parts) in task_parts.items():
            out[key] = (algo, parts if counts[algo, tuple(parts)] == 1 else [*parts, f"#{key[2][:6]}"])
    return out


def label_text(algo: str, parts, n=None, tail: str = "") -> str:
    parts = [*parts, *([f"n={n}"] if n is not None else [])]
    return (f"{algo} ({', '.join(parts)})" if parts else algo) + tail
