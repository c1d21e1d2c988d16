"""Re-key runs recorded before the preset names left the config hash (bench.identity).

    python -m tools.migrate ROOT [ROOT ...] [--dry-run]

moves every `<task>/<algo>/<legacy hash>/seed=<n>` under ROOT to its current hash and
rewrites the hash inside (summary.json, config.json, metrics.parquet, checkpoint.pt), so
the runner finds (skips, resumes) it again. A run held by a live process, or whose new
place is taken, is left as it is and named; it exits 1 if any was. Run it again any
time: a run already under its current hash is left alone.

Tables written before (reproduction/results.parquet) are re-keyed as they are read
(`rekey_table`): their configs are rebuilt from their own columns and each legacy hash
is replaced only where recomputing it from those columns gives it back.
"""
from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algorithms import ALGORITHMS
from bench.identity import config_hash, legacy_hash
from contract import io, schema
from contract.registry import UnknownName
from tasks import TASKS

TOP_LEVEL = {"match": str, "match_k": int}  # the config's science keys outside the sections
SECTIONS = ("task", "algo", "optim")


# ---------------------------------------------------------------- tables

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
    """The nested config a table row was flattened from (bench.identity.flatten), typed by
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


# ---------------------------------------------------------------- run directories

class Unreadable(ValueError):
    """A file of the run that migrate would rewrite cannot be read; the message says which."""


def _read(path: Path) -> tuple[pd.DataFrame | None, dict | None, dict | None]:
    """(metrics, checkpoint state, summary) of a run, each None where absent; Unreadable
    for a damaged one, so nothing is rewritten in a run that cannot be rewritten whole."""
    metrics = state = summary = None
    if (path / schema.METRICS).exists():
        try:
            metrics = pd.read_parquet(path / schema.METRICS)
        except Exception as e:  # pyarrow raises several types for a torn or foreign file
            raise Unreadable(f"{schema.METRICS} unreadable ({type(e).__name__})") from None
    if (path / schema.CHECKPOINT).exists():
        from bench import checkpoint  # only here: reading a table needs no torch

        try:
            state = checkpoint.load(path)
        except checkpoint.CheckpointError:
            raise Unreadable(f"{schema.CHECKPOINT} is damaged or not a tpo-bench checkpoint; "
                             f"remove it (the run restarts from step 0) and migrate again") from None
    if (path / schema.SUMMARY).exists():
        try:
            summary = io.read_json_object(path / schema.SUMMARY)
        except (OSError, io.DamagedFile) as e:
            raise Unreadable(f"{schema.SUMMARY}: {e}") from None
    return metrics, state, summary


def _rewrite(path: Path, old: str, new: str) -> None:
    """The hash inside a run: the table's column, the checkpoint's identity, then the
    two JSON records (summary last: it is what collect reads first). Every file is read
    before the first is written (Unreadable: none is)."""
    df, state, summary = _read(path)
    if df is not None and "config_hash" in df.columns:
        io.write_parquet(path / schema.METRICS, df.assign(config_hash=new))
    if state is not None and isinstance(state.get("identity"), dict):
        import torch

        state["identity"]["config_hash"] = new
        with io.atomic_path(path / schema.CHECKPOINT) as tmp:
            torch.save(state, tmp)
    if summary is not None:
        run_dir = str(summary.get("run_dir", ""))
        io.write_json(path / schema.SUMMARY, {
            **summary, "config_hash": new, "legacy_config_hash": old,
            "run_dir": run_dir.replace(f"/{old}/", f"/{new}/") if run_dir else run_dir})


def check_run(path: Path) -> tuple[str, str]:
    """What migrate_run would do to one run directory, doing nothing."""
    try:
        config = io.read_json_object(path / schema.CONFIG)
        _read(path)
    except (OSError, io.DamagedFile, Unreadable) as e:
        return "left", f"{e}" if isinstance(e, Unreadable) else f"no readable {schema.CONFIG} ({e})"
    if schema.parse_run_dir(path).config_hash == config_hash(config):
        return "current", ""
    return "moved", f"would move to hash {config_hash(config)}"


def migrate_run(path: Path) -> tuple[str, str]:
    """(what happened, detail) for one run directory."""
    where = schema.parse_run_dir(path)
    try:
        config = io.read_json_object(path / schema.CONFIG)
    except (OSError, io.DamagedFile) as e:
        return "left", f"no readable {schema.CONFIG} ({e})"
    new = config_hash(config)
    if where.config_hash == new:
        return "current", new
    if where.config_hash != legacy_hash(config):
        return "left", (f"its folder says {where.config_hash}, its {schema.CONFIG} hashes to "
                        f"{legacy_hash(config)} (legacy) / {new}: not a run this tool wrote")
    target = schema.run_dir(path.parents[3], where.task, where.algo, new, where.seed)
    elsewhere = schema.find_run(path.parents[3], new, where.seed)
    if target.exists() or elsewhere is not None:
        return "left", f"{target if target.exists() else elsewhere} already holds this run"
    from bench import rundir  # only here: its checkpoint module needs torch

    rd = rundir.RunDir(path)
    holder = rd.acquire()
    if holder is not None:
        return "left", f"held by {rundir.describe(holder)}"
    try:
        try:
            _rewrite(path, where.config_hash, new)
        except Unreadable as e:
            return "left", str(e)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)  # under the lock: a runner cannot start on it mid-move
    finally:
        rd.release()
    if not any(path.parent.iterdir()):
        path.parent.rmdir()
    return "moved", str(target)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.migrate", description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="+", type=Path, metavar="ROOT", help="an output_root to re-key")
    p.add_argument("--dry-run", action="store_true", help="say what would move; move nothing")
    args = p.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        print(f"error: ROOT {', '.join(missing)}: not a directory", file=sys.stderr)
        return 2
    counts = {"moved": 0, "current": 0, "left": 0}
    for root in args.roots:
        for path in schema.run_dirs(root):
            try:
                what, detail = check_run(path) if args.dry_run else migrate_run(path)
            except OSError as e:  # unreadable folder, a full disk: this run, not the rest
                what, detail = "left", f"{type(e).__name__}: {e}"
            counts[what] += 1
            if what != "current":
                print(f"[{what}] {path}: {detail}", file=sys.stderr if what == "left" else sys.stdout)
    verb = "would move" if args.dry_run else "moved"
    print(f"{verb} {counts['moved']}, already current {counts['current']}, left {counts['left']}")
    return 1 if counts["left"] else 0


if __name__ == "__main__":
    sys.exit(main())
