"""Tables written before the preset names left the config hash (contract.identity), such
as reproduction/results.parquet, re-keyed as they are read: each run's config is rebuilt
from its own columns, typed by its task's and algorithm's dataclass fields, and a legacy
hash is replaced only where recomputing it from those columns gives it back.
(`python -m tools.migrate` re-keys run directories on disk.)
"""
from __future__ import annotations

import json
import typing
from typing import Any

import numpy as np
import pandas as pd

from ..contract.identity import config_hash, legacy_hash
from ..contract.registry import ALGORITHMS, TASKS, UnknownName

TOP_LEVEL = {"match": str, "match_k": int}  # the config's science keys outside the sections
SECTIONS = ("task", "algo", "optim")


def _field_types(section: str, impl: Any) -> dict[str, Any]:
    if section == "optim" or impl is None:
        # every optimizer hyperparameter is a float (bench.optim); no impl names no types
        return {}
    try:
        return typing.get_type_hints((TASKS if section == "task" else ALGORITHMS).get(str(impl)))
    except UnknownName:
        return {}


def _value(value: Any, want: Any, float32: bool) -> Any:
    value = value.item() if isinstance(value, np.generic) else value
    if typing.get_origin(want) in (list, tuple) and isinstance(value, str):
        return json.loads(value)  # flatten wrote the list as JSON text
    if want is bool or isinstance(value, bool):
        return bool(value)
    if want is int or (want is None and isinstance(value, float) and value.is_integer()):
        return int(value)
    if want is float or isinstance(value, float):
        # A table may store a float column as float32: its shortest float32 text is the
        # number the config said (0.001, not 0.0010000000474974513).
        return float(np.format_float_positional(np.float32(value), unique=True)) if float32 \
            else float(value)
    return value


def config_of_row(row: dict[str, Any], float32: bool = False) -> dict[str, Any]:
    """The nested config a table row was flattened from (contract.identity.flatten), typed by
    the task's and algorithm's dataclass fields; absent values (another run's columns in
    a shared table) left out."""
    out: dict[str, Any] = {}
    for col, value in row.items():
        if value is None or (isinstance(value, float) and value != value):
            continue
        head, _, rest = col.partition(".")
        if head in SECTIONS and rest:
            types = _field_types(head, row.get(f"{head}.impl"))
            want = float if head == "optim" and rest != "name" else types.get(rest)
            out.setdefault(head, {})[rest] = _value(value, want, float32)
        elif col in TOP_LEVEL:
            out[col] = _value(value, TOP_LEVEL[col], float32)
    return out


def config_columns(columns) -> list[str]:
    """The columns of a table that hold a run's config (config_of_row reads them)."""
    return [c for c in columns if c.partition(".")[0] in SECTIONS or c in TOP_LEVEL]


def current_hash(h: str, row: dict[str, Any]) -> str | None:
    """The current hash of a run recorded under `h`, where `h` is the legacy hash of the
    config rebuilt from its row's config columns; None where `h` is current or unknown.
    A row whose values as stored already hash to `h` is current without typing them (no
    task or algorithm is imported for it)."""
    raw = {}
    for col, value in row.items():
        value = value.item() if isinstance(value, np.generic) else value
        if value is None or (isinstance(value, float) and value != value):
            continue
        head, _, rest = col.partition(".")
        if head in SECTIONS and rest:
            raw.setdefault(head, {})[rest] = value
        elif col in TOP_LEVEL:
            raw[col] = value
    if config_hash(raw) == h:
        return None
    for float32 in (False, True):
        config = config_of_row(row, float32)
        if config_hash(config) == h:
            return None
        if legacy_hash(config) == h:
            return config_hash(config)
    return None


def rekey_table(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """The table with every run under its current hash, and {legacy: current}. A hash is
    re-keyed only where the config rebuilt from the row's own columns has it as its legacy
    hash, so nothing is re-keyed by guess; current hashes and unknown ones stay."""
    if df.empty or "config_hash" not in df.columns:
        return df, {}
    cols = config_columns(df.columns)
    mapping: dict[str, str] = {}
    for h, row in df.drop_duplicates("config_hash").set_index("config_hash")[cols].iterrows():
        new = current_hash(h, row.to_dict())
        if new is not None:
            mapping[str(h)] = new
    if mapping:
        df = df.assign(config_hash=df["config_hash"].replace(mapping))
    return df, mapping
