"""Gather every completed run under an output root into one parquet table.

    python analysis/collect.py [ROOT] [--out FILE] [--allow-skips] [--prior-attempts] [--progress]

A run is a `<root>/<task>/<algo>/<config_hash>/seed=<n>/` directory. It is kept only if
its summary.json (written last by the runner) says "completed", its metrics.parquet reads
cleanly and agrees with its config, its summary and its directory (no partial rows, the
rows the config's length implies, its own seed and hash), and no other copy of the same
(config_hash, seed) was kept before it. Everything else is reported with its reason. A
run that failed, was interrupted or is still running is left out and collect goes on
(exit 0); a run whose files contradict each other (a damaged "completed" one, a second
copy) stops it with exit 1 and nothing written, unless --allow-skips (then the table of
the runs kept is written). --prior-attempts adds the earlier results on_code_change=rerun
kept inside run directories, each line that holds one labelled by its code fingerprint.
"""
import argparse
import contextlib
import errno
import fcntl
import functools
import os
import socket
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc  # noqa: F401 (pa.ipc)
import pyarrow.parquet as pq

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis"
from .rekey import config_columns, current_hash, rekey_table
from ..cli import spelled
from ..contract import io, schema
from ..contract.identity import flatten
from ..contract.schema import STALE_AFTER_S  # a running run silent this long lost its process

DEFAULT_ROOT = schema.OUTPUT_ROOT
# Runs that are not (yet) a result: reported and left out of the table without stopping
# collect. Anything else skipped (a damaged file, a table that disagrees with its summary,
# a second copy) stops it unless --allow-skips.
LEFT_OUT = ("failed", "running", "incomplete", "unreadable")
DEFAULT_OUT = f"{DEFAULT_ROOT}/results.parquet"  # where plot, leaderboard and the report look by default
# One line of a figure, one configuration of a report row: (task, algorithm, config hash).
# Seeds of different hashes are never pooled.
GROUP = ["task.name", "algo.name", "config_hash"]
# The columns every reader of the table needs (read_results refuses a table without them).
REQUIRED = GROUP + ["seed", "step", "error"]
# summary.json's and the table's fingerprint of the source a run's algorithm and task (and
# plugins) came from; None for a run recorded without one (unknown, so it conflicts with none).
CODE = "code_fingerprint"
# The table's own record (df.attrs, kept in the parquet file) of the runs it was collected from.
COLLECTED = "collected"
# While collect runs: marks the rows of an earlier result kept in a run directory
# (--prior-attempts), until their lines are labelled by code; never in a written table.
PRIOR = "_prior_attempt"
# The columns that say whose rows a run's table holds: without one its rows would join
# no line (or the wrong one), so a run's table lacking any is not that run's result.
IDENTITY = GROUP + ["seed"]
# in_progress's column: how a run that is not completed stands ("running", "interrupted").
PROGRESS = "run_status"
# One row of a run: a table holds each at most once (a second would be averaged in as data).
ROW_KEY = IDENTITY + ["step"]

# Over many runs (a network file system, thousands of tables) collect says how far it got
# on stderr (stdout is the report scripts parse): a line every PROGRESS_EVERY_S, and at
# the end of a pass (summaries, then tables) its count when collect has taken
# PROGRESS_AFTER_S so far, the pass covered PROGRESS_MANY runs or printed a line, and
# always with --progress. A small, quick collect stays silent.
PROGRESS_AFTER_S = 2.0
PROGRESS_EVERY_S = 5.0
PROGRESS_MANY = 1000


class Progress:
    """`collect: 340/560 run directories read (12 s)` lines on stderr for one pass."""

    def __init__(self, what: str, forced: bool = False, started: float | None = None,
                 stream=None, clock=time.monotonic):
        self.what, self.forced, self.clock = what, forced, clock
        self.stream = stream or sys.stderr
        self.started = clock() if started is None else started  # shared by the passes
        self.last: float | None = None  # when the last line was printed

    def _say(self, done: int, total: int, now: float) -> None:
        self.stream.write(f"collect: {done}/{total} {self.what} ({now - self.started:.0f} s)\n")
        self.stream.flush()
        self.last = now

    def track(self, items: list):
        """Yields `items`, saying how many were handled when it is time to."""
        for done, item in enumerate(items, 1):
            yield item
            now = self.clock()
            if done < len(items) and now - (self.started if self.last is None else self.last) >= PROGRESS_EVERY_S:
                self._say(done, len(items), now)
        now = self.clock()
        if self.forced or self.last is not None or len(items) >= PROGRESS_MANY or \
                now - self.started >= PROGRESS_AFTER_S:
            self._say(len(items), len(items), now)


def _tracked(items: list, progress: Progress | None):
    return items if progress is None else progress.track(items)


@dataclass
class RunInfo:
    path: Path  # the seed=<n> directory
    status: str  # "completed" | "failed" | "running" | "incomplete" | "unknown" | "corrupt"
    #              | "inconsistent" | "duplicate"
    reason: str | None  # why the run is skipped; None for completed runs
    summary: dict | None = None  # its summary.json, where that is readable
    prior: str | None = None  # an earlier result kept in this folder inside path (prior-attempt-<n>)

    @property
    def metrics_path(self) -> Path:
        return self.path / (self.prior or "") / schema.METRICS


class DamagedSummary(ValueError):
    pass


def _number(info: dict, key: str, kind=(int, float)):
    value = info.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
        raise DamagedSummary(f"{key!r} is {value!r}, not {'an integer' if kind is int else 'a number'}")
    return value


def read_summary(path: Path) -> dict:
    """summary.json as a dict whose fields collect reads have their types; DamagedSummary
    says what is wrong (a torn write, an edit by hand, a disk error)."""
    try:
        text = path.read_text()
    except PermissionError:
        raise  # another user's file, not damage: the caller names it unreadable
    except (OSError, UnicodeDecodeError) as e:
        raise DamagedSummary(f"unreadable ({e})") from None
    if not text.strip():
        raise DamagedSummary("empty")
    try:
        info = json.loads(text)
    except ValueError as e:
        raise DamagedSummary(f"invalid JSON ({e})") from None
    if not isinstance(info, dict):
        raise DamagedSummary(f"not a JSON object (a {type(info).__name__})")
    for key in ("status", "reason", "error_kind", "git_commit", "config_hash", CODE):
        if info.get(key) is not None and not isinstance(info[key], str):
            raise DamagedSummary(f"{key!r} is {info[key]!r}, not a string")
    for key in ("heartbeat", "started_at"):
        _number(info, key)
    _number(info, "rows", int)
    _number(info, "seed", int)
    commits = info.get("git_commits")
    # None entries are attempts outside a git checkout (the runner records what it knows).
    if commits is not None and not (isinstance(commits, list) and all(isinstance(c, (str, type(None)))
                                                                      for c in commits)):
        raise DamagedSummary(f"'git_commits' is {commits!r}, not a list of commits")
    return info


def _unreadable(path: Path, e: OSError) -> RunInfo:
    where = e.filename or path
    return RunInfo(Path(path), "unreadable", f"unreadable ({e.strerror}: {where}): made by another "
                                             "user (umask 077?); its owner can share it with chmod -R g+rX")


def _classify(run_dir: Path, stale_after: float = STALE_AFTER_S) -> RunInfo:
    try:
        return _classify_readable(run_dir, stale_after)
    except PermissionError as e:
        return _unreadable(run_dir, e)


def _classify_readable(run_dir: Path, stale_after: float) -> RunInfo:
    summary = run_dir / schema.SUMMARY
    if not summary.is_file():
        return RunInfo(run_dir, "incomplete", "incomplete (no summary.json)")
    try:
        info = read_summary(summary)
    except DamagedSummary as e:
        # The runner refuses such a run too (it cannot tell what state it is in).
        return RunInfo(run_dir, "corrupt", f"damaged {summary}: {e}; remove it and re-run "
                                           "(it resumes from its checkpoint, if any) or re-run with force=true")
    status = info.get("status")
    if status == schema.COMPLETED:
        return RunInfo(run_dir, "completed", None, info)
    if status == schema.FAILED:
        if info.get("error_kind") == schema.IO_ERROR:  # the runner's mark for an OSError (disk full, read-only fs)
            return RunInfo(run_dir, "failed", f"I/O error: {info.get('reason')}", info)
        return RunInfo(run_dir, "failed", f"failed: {info.get('reason')}", info)
    if status == schema.RUNNING:
        age = time.time() - float(info.get("heartbeat") or info.get("started_at") or 0)
        if age < -stale_after:  # a beat from the future proves nothing: another node's clock
            return RunInfo(run_dir, "incomplete", f"incomplete (heartbeat {-age:.0f} s in the future: "
                                                  "its node's clock is ahead of this one's; if it "
                                                  "is not running, re-run to resume: a live run "
                                                  "keeps its lock)")
        if age > stale_after:
            return RunInfo(run_dir, "incomplete", f"incomplete (heartbeat stale for {age:.0f} s: "
                                                  "killed from outside? re-run to resume)")
        return RunInfo(run_dir, "running", f"incomplete (running, heartbeat {age:.0f} s ago)")
    if status == schema.INTERRUPTED:
        return RunInfo(run_dir, "incomplete", f"incomplete (interrupted: {info.get('reason')}; "
                                              "re-run to resume)")
    return RunInfo(run_dir, "unknown", f"unknown status {status!r}")


def find_runs(root, stale_after: float = STALE_AFTER_S, progress: Progress | None = None) -> list[RunInfo]:
    """Every seed=<n> directory under root, classified by its summary.json; a folder this
    user cannot list is an `unreadable` entry (left out, named)."""
    unreadable: list = []
    found = list(schema.run_dirs(root, unreadable))
    return [_classify(d, stale_after) for d in _tracked(found, progress)] + \
        [_unreadable(folder, e) for folder, e in unreadable]


def prior_attempts(runs: list[RunInfo]) -> list[RunInfo]:
    """The earlier results that on_code_change=rerun kept inside the runs' directories
    (`prior-attempt-<n>/`, bench.runner.keep_prior), each as a run of its own: one per code
    fingerprint a run directory completed under, the newest first, none under its current
    result's. A kept summary that cannot be read is a corrupt entry, named."""
    out = []
    for run in runs:
        if run.status == "unreadable":
            continue
        try:
            kept = [(int(m.group(1)), e.name) for e in os.scandir(run.path)
                    if (m := schema.PRIOR_ATTEMPT.fullmatch(e.name)) and e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        seen = {(run.summary or {}).get(CODE)} if run.status == "completed" else set()
        for _, name in sorted(kept, reverse=True):
            try:
                info = read_summary(run.path / name / schema.SUMMARY)
            except PermissionError as e:
                out.append(_unreadable(run.path / name, e))
                continue
            except DamagedSummary as e:
                out.append(RunInfo(run.path, "corrupt", f"damaged {name}/{schema.SUMMARY}: {e}", prior=name))
                continue
            code = info.get(CODE)
            if info.get("status") == schema.COMPLETED and code and code not in seen:
                seen.add(code)
                out.append(RunInfo(run.path, "completed", None, info, prior=name))
    return out


def read_metrics(path: Path) -> pa.Table:
    """Read one metrics.parquet; raises ValueError (or pyarrow's error) if it is unusable.
    One thread: thousands of small files read faster without arrow's pool."""
    with pq.ParquetFile(path, pre_buffer=False) as f:
        table = f.read(use_threads=False)
    missing = {"step", "error"} - set(table.column_names)
    if missing:
        raise ValueError(f"missing columns {sorted(missing)}")
    if table.num_rows == 0:
        raise ValueError("no rows")
    return table


def _distinct(table: pa.Table, col: str) -> list:
    """The distinct values of a column that are not missing (None, NaN), as Python values;
    [] where the column is absent."""
    if col not in table.column_names:
        return []
    # a Python pass: cheaper than a compute kernel's dispatch on a run's few rows
    return list(dict.fromkeys(v for v in table.column(col).to_pylist() if v is not None and v == v))


class Values(dict):
    """A table's columns' distinct values (_distinct), each column's worked out once."""

    def __init__(self, table: pa.Table):
        super().__init__()
        self.table = table

    def __missing__(self, col: str) -> list:
        self[col] = found = _distinct(self.table, col)
        return found


def _constant(table: pa.Table | Values, col: str):
    """The one value of a per-run column; None where absent or missing."""
    values = table[col] if isinstance(table, Values) else _distinct(table, col)
    return values[0] if len(values) == 1 else None


def expected_steps(episodes: int, eval_every: int | None) -> list[int]:
    """The steps the runner logs: one row per episode (step = its index) or, for a task
    that evaluates every `eval_every` updates, one row before the first update and one
    per evaluation after it, the last at `episodes` (step = updates done)."""
    if not eval_every:
        return list(range(episodes))
    return [0, *range(eval_every, episodes + 1, eval_every), *([episodes] if episodes % eval_every else [])]


def expected_count(episodes: int, eval_every: int | None) -> int:
    """len(expected_steps(episodes, eval_every)), without building the list."""
    if not eval_every:
        return max(episodes, 0)
    return 1 + max(episodes, 0) // eval_every + (1 if episodes > 0 and episodes % eval_every else 0)


def last_step(episodes: int, eval_every: int | None) -> int:
    """The step of a complete run's final row (expected_steps(...)[-1])."""
    return episodes if eval_every else episodes - 1


def _steps(steps: list) -> str:
    shown = steps if len(steps) <= 6 else [*steps[:3], "...", *steps[-2:]]
    return ", ".join(str(s) for s in shown)


def inconsistencies(run: RunInfo, df: pa.Table, values: Values | None = None) -> list[str]:
    """Why a table that summary.json calls completed cannot be that run's result
    (`values`: df's Values, where the caller keeps them)."""
    values = Values(df) if values is None else values
    problems = []
    if "partial" in df.column_names:
        n = sum(1 for v in df.column("partial").to_pylist() if v is not None and v == v and v)
        if n:
            problems.append(f"{n} partial row{'s' * (n > 1)} in a completed run")
    summary = run.summary or {}
    lacking = sorted(set(IDENTITY) - set(df.column_names))
    if lacking:
        problems.append(f"metrics.parquet lacks {', '.join(lacking)}")
    where_ = schema.parse_run_dir(run.path)
    for col, where in (("seed", str(where_.seed)), ("config_hash", where_.config_hash)):
        if col not in df.column_names:
            continue
        if len(values[col]) != 1:
            problems.append(f"metrics.parquet holds {len(values[col])} values of {col}")
            continue
        mine = str(values[col][0])
        if mine != where:
            problems.append(f"metrics.parquet says {col} {mine}, its directory is "
                            f"{run.path.name if col == 'seed' else run.path.parent.name}")
        elif summary.get(col) is not None and str(summary[col]) != mine:
            problems.append(f"summary.json says {col} {summary[col]}, metrics.parquet {mine}")
    for col, where in (("task.name", where_.task), ("algo.name", where_.algo)):
        if len(values[col]) > 1 or (values[col] and str(values[col][0]) != where):
            problems.append(f"metrics.parquet says {col} {', '.join(map(str, values[col]))}, "
                            f"its path says {where}")
    # The runner ends a run whose error is infinite as diverged: a completed one never
    # holds one. (NaN may stand where a row has no error: an evaluation row of a task
    # whose evaluation measures test_error only.)
    bad = [v for v in df.column("error").to_pylist() if isinstance(v, float) and math.isinf(v)]
    if bad:
        problems.append(f"{len(bad)} infinite error value{'s' * (len(bad) > 1)} "
                        f"({', '.join(map(str, bad[:3]))}) in a completed run")
    problems += schema.path_disagreements(run.path)
    problems += _config_disagreements(run.path, df)
    episodes, eval_every = _constant(values, "task.episodes"), _constant(values, "task.eval_every")
    if isinstance(episodes, (int, float)) and math.isfinite(episodes) and episodes == int(episodes):
        every = int(eval_every) if isinstance(eval_every, (int, float)) and math.isfinite(eval_every) \
            and eval_every > 0 else None
        have, count = df.column("step").to_pylist(), expected_count(int(episodes), every)
        config = f"task.episodes={int(episodes)}" + (
            f", task.eval_every={every}: one row per evaluation plus the first" if every else "")
        # the count first: a table's claim (task.episodes=1e12) never sizes what is built
        if len(have) != count:
            span = f"steps {min(have)}..{max(have)}" if have else "no steps"
            problems.append(f"{len(have)} rows, {span}; the config expects {count} ({config})")
        elif have != (want := expected_steps(int(episodes), every)):
            problems.append(f"steps {_steps(have)}; the config expects {_steps(want)} ({config})")
    if summary.get("rows") is not None and summary["rows"] != df.num_rows:
        problems.append(f"summary.json says {summary['rows']} rows, metrics.parquet has {df.num_rows}")
    return problems


def _config_disagreements(run_dir: Path, df: pa.Table) -> list[str]:
    """Where the table's config columns (their first row: the runner writes them constant
    per run) disagree with the run's
    config.json, the config its hash is of: an edited table would otherwise pool under a
    hash that does not describe it. [] where config.json is absent or unreadable (the
    path check names that)."""
    try:
        config = json.loads((run_dir / schema.CONFIG).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(config, dict):
        return []
    want = {k: v for k, v in flatten(config).items() if k in df.column_names}
    if not want:
        return []
    have = df.select(list(want)).slice(0, 1).to_pylist()[0]
    return [f"metrics.parquet says {k} {have[k]}, config.json {v}" for k, v in want.items()
            if have[k] != v and not (v is None and have[k] is None)]


def _commits(summary: dict) -> tuple[str | None, str | None]:
    """(git_commit, git_commits joined by ';'); a run from before summary.json listed every
    commit it ran under has run under its git_commit alone, as far as anyone can tell."""
    commit = summary.get("git_commit")
    return commit, ";".join(c or "unknown" for c in summary.get("git_commits") or []) or commit


def _is_canonical(run: RunInfo, values: Values, root) -> bool:
    """Whether the directory is where the runner writes this run (not a copy elsewhere)."""
    if root is None:
        return False
    want = (str(_constant(values, "task.name")), str(_constant(values, "algo.name")), run.path.parent.name,
            run.path.name)
    return run.path.relative_to(root).parts == want


def collect(root, stale_after: float = STALE_AFTER_S) -> tuple[pd.DataFrame, list[RunInfo]]:
    """(rows of all completed runs, skipped runs with their reasons)."""
    return load_runs(find_runs(root, stale_after), root)


def in_progress(root, stale_after: float = STALE_AFTER_S) -> pd.DataFrame:
    """The rows so far of the runs under root that are under way, for figures only (no
    result: collect leaves them out of the table): a run running, or interrupted (or
    silent past stale_after) and resumable, whose metrics.parquet holds the episodes
    of its last attempt, its own (hash and seed as its folder says). Each row is marked
    `partial`, and PROGRESS says "running" or "interrupted"."""
    frames = []
    for run in find_runs(root, stale_after):
        if run.status not in ("running", "incomplete") or not run.metrics_path.is_file():
            continue
        try:
            df = read_metrics(run.metrics_path).to_pandas()
        except Exception:  # unreadable or torn: nothing to draw
            continue
        own = schema.parse_run_dir(run.path)
        if (set(IDENTITY) - set(df.columns) or own is None
                or set(df["config_hash"]) != {own.config_hash} or set(df["seed"]) != {own.seed}):
            continue
        frames.append(df.assign(partial=True, **{PROGRESS: "running" if run.status == "running"
                                                 else "interrupted"}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of completed runs: without in_progress's rows."""
    if "partial" not in df.columns:
        return df
    return df[~df["partial"].eq(True)]


def load_runs(runs: list[RunInfo], root=None,
              progress: Progress | None = None) -> tuple[pd.DataFrame, list[RunInfo]]:
    frames, skipped = [], []
    current: dict[str, str | None] = {}  # (hash, config values) -> its current hash
    schemas: list[pa.Schema] = []  # each distinct table schema once (_pack)
    for run in _tracked(runs, progress):
        if run.status != "completed":
            skipped.append(run)
            continue
        if not run.metrics_path.is_file():
            skipped.append(RunInfo(run.path, "corrupt", f"damaged: {schema.SUMMARY} says completed, "
                                                        f"{schema.METRICS} is missing; re-run it with "
                                                        "force=true"))
            continue
        try:
            df = read_metrics(run.metrics_path)
        except PermissionError as e:
            skipped.append(_unreadable(run.path, e))
            continue
        except Exception as e:  # pyarrow raises several types for truncated/garbage files
            skipped.append(RunInfo(run.path, "corrupt", f"corrupt metrics.parquet: {e}"))
            continue
        values = Values(df)
        problems = inconsistencies(run, df, values)
        if problems:
            skipped.append(RunInfo(run.path, "inconsistent", "inconsistent: " + "; ".join(problems)))
            continue
        rekeyed = _rekeyed(df, current)  # a run recorded before the hash lost the names
        if rekeyed is not df:
            df = values.table = rekeyed
            values.pop("config_hash", None)
        key = (_constant(values, "config_hash"), _constant(values, "seed"))
        if None in key:
            key = (run.path.parent.name, run.path.name)
        commit, commits = _commits(run.summary or {})
        # an empty fingerprint is no fingerprint: unknown code, like a run without one
        provenance = {"git_commit": commit, "git_commits": commits, CODE: (run.summary or {}).get(CODE) or None}
        if run.prior:  # one result per (hash, seed, code); marked until its line is labelled
            key, provenance[PRIOR] = (*key, provenance[CODE]), True
        for col, value in provenance.items():
            df = df.append_column(col, pa.array([value] * df.num_rows))
        frames.append((run, _is_canonical(run, values, root), key, _pack(df, schemas)))
    # One (config_hash, seed) is one run however many copies lie under the root (a backup
    # copied into it, a directory moved and copied back): the copy where the runner
    # writes it wins, else the shallowest, else the first by path.
    kept: dict[tuple, Path] = {}
    out = []
    for run, _, key, packed in sorted(frames, key=lambda f: (not f[1], len(f[0].path.parts),
                                                             str(f[0].path))):
        if key in kept:
            first = kept[key]
            shown = first.relative_to(root) if root is not None else first
            skipped.append(RunInfo(run.path, "duplicate", f"duplicate of {shown} (config_hash "
                                                          f"{key[0]}, seed {key[1]}"
                                                          + (f", code {key[2]}" if run.prior else "")
                                                          + "): counted once", prior=run.prior))
            continue
        kept[key] = run.path / (run.prior or "")
        out.append(packed)
    return _to_pandas(out, schemas), skipped


def _rekeyed(df: pa.Table, current: dict) -> pa.Table:
    """The run's table under its current config hash (analysis.rekey.current_hash), worked
    out once per hash and config (the cache `current`)."""
    if "config_hash" not in df.column_names:
        return df
    cols = config_columns(df.column_names)
    row = df.select(cols).slice(0, 1).to_pylist()[0]  # one conversion, not one per column
    h = df.column("config_hash")[0].as_py()
    key = repr((h, sorted(row.items())))
    if key not in current:
        current[key] = current_hash(h, row) if isinstance(h, str) else None
    new = current[key]
    if new is None:
        return df
    i = df.column_names.index("config_hash")
    return df.set_column(i, "config_hash", pa.array([new] * df.num_rows, df.schema.field(i).type))


BLOCK_RUNS = 256  # runs converted to pandas at a time: few conversions, small transients


def _pack(df: pa.Table, schemas: list[pa.Schema]) -> tuple[int, list[pa.Buffer]]:
    """A run's rows as serialized record batches and the index of their schema in
    `schemas` (each distinct one kept once): a few kilobytes a run where a table object
    costs tens, so memory grows with rows, not runs."""
    for i in range(len(schemas) - 1, -1, -1):  # few schemas; the last one most likely
        if schemas[i].equals(df.schema, check_metadata=True):
            break
    else:
        schemas.append(df.schema)
        i = len(schemas) - 1
    return i, [batch.serialize() for batch in df.combine_chunks().to_batches()]


def _to_pandas(packed: list[tuple[int, list[pa.Buffer]]], schemas: list[pa.Schema]) -> pd.DataFrame:
    """The runs' rows in order as one DataFrame: up to BLOCK_RUNS consecutive runs of one
    schema converted together, so the cost is per row, not per run."""
    per_block = BLOCK_RUNS
    if not packed:
        return pd.DataFrame()
    blocks, start = [], 0
    for i in range(1, len(packed) + 1):
        if i == len(packed) or packed[i][0] != packed[start][0] or i - start == per_block:
            schema_ = schemas[packed[start][0]]
            batches = [pa.ipc.read_record_batch(buf, schema_) for _, bufs in packed[start:i]
                       for buf in bufs]
            blocks.append(pa.Table.from_batches(batches, schema_).to_pandas())
            start = i
    return pd.concat(blocks, ignore_index=True) if len(blocks) > 1 else blocks[0]


def mixed_code(df: pd.DataFrame) -> dict[tuple, dict[str, list]]:
    """Lines (GROUP keys) whose seeds ran under more than one known code fingerprint:
    {key: {fingerprint: [seeds]}}. A seed without one (unknown) conflicts with none."""
    if CODE not in df.columns or df[CODE].isna().all():
        return {}
    known = df[df[CODE].notna()].drop_duplicates([*GROUP, "seed", CODE])
    out = {}
    for key, g in known.groupby(GROUP, sort=True):
        if g[CODE].nunique() > 1:
            out[key] = {fp: sorted(s["seed"].tolist()) for fp, s in g.groupby(CODE, sort=True)}
    return out


def split_code(df: pd.DataFrame, mixed: dict) -> pd.DataFrame:
    """Each mixed line split into one line per code fingerprint, labelled in its algo.name
    ("tpo [code 1a2b3c4d]"); seeds without a fingerprint keep the plain name."""
    rows = df.set_index(GROUP).index.isin(list(mixed)) & df[CODE].notna()
    algo = df["algo.name"].astype(object)
    algo[rows] = [f"{a} [code {str(fp)[:8]}]" for a, fp in zip(algo[rows], df.loc[rows, CODE])]
    return df.assign(**{"algo.name": algo.astype(df["algo.name"].dtype)})


def label_prior_lines(df: pd.DataFrame) -> pd.DataFrame:
    """Each line holding a prior attempt's rows (load_runs marks them) split into one line
    per code fingerprint (split_code), so an earlier result never reads as today's; the
    mark dropped."""
    if PRIOR not in df.columns:
        return df
    marked = df[PRIOR].eq(True)
    lines = {key: None for key in df.loc[marked, GROUP].itertuples(index=False, name=None)}
    return split_code(df.drop(columns=PRIOR), lines)


def check_code(df: pd.DataFrame, split: bool = False) -> pd.DataFrame | None:
    """The table with no line pooling seeds of different code: with `split`, such lines
    split (split_code); without, None after one line per mixed line on stderr."""
    mixed = mixed_code(df)
    if not mixed or split:
        return split_code(df, mixed) if mixed else df
    for (task, algo, h), fps in mixed.items():
        ran = "; ".join(f"{fp[:12]}: seed{'s' * (len(s) > 1)} {', '.join(map(str, s))}"
                        for fp, s in fps.items())
        print(f"error: {algo} on {task} (config {h}) pools seeds of {len(fps)} code versions "
              f"({ran}); re-run the older seeds, or pass --split-code to draw each as its own "
              f"line", file=sys.stderr)
    return None


def stamp(summary: dict | None) -> str:
    """What a run's record says of it, in one string (status, end, attempts, error kind):
    a table remembers each run's stamp as collected, and a new stamp means a new result."""
    s = summary if isinstance(summary, dict) else {}
    return "|".join(str(s.get(k)) for k in ("status", "finished_at", "attempts", "error_kind"))


def record_collected(df: pd.DataFrame, root, runs: list[RunInfo], before: dict | None = None) -> None:
    """Into df.attrs[COLLECTED] (kept in the parquet file): {root: {run folder: stamp}} of
    every run folder seen under root, completed or left out, beside `before`'s other roots."""
    given, root = Path(root).absolute(), Path(root).resolve()
    seen = {str(r.path.absolute().relative_to(given) if r.path.absolute().is_relative_to(given)
                else r.path): stamp(r.summary) for r in runs}
    df.attrs[COLLECTED] = {**{k: v for k, v in (before or {}).items() if k != str(root)}, str(root): seen}


def table_record(table) -> dict:
    """The table's {root: {run folder: stamp}}; {} for a table collected without one."""
    try:
        meta = pq.read_schema(table).metadata or {}
        record = json.loads(meta.get(b"PANDAS_ATTRS", b"{}")).get(COLLECTED)
    except (OSError, ValueError, pa.ArrowException):
        return {}
    return record if isinstance(record, dict) else {}


def newer_runs(table, root=None) -> list[Path]:
    """Completed run directories the table cannot hold: under each root it was collected
    from, every one whose record differs from the one collected (content, whatever the
    clocks); under root (default: the table's folder) if it is not one of those, every
    one finished after the table was written, by summary.json's finished_at where it has
    one (a checkout or a copy gives every file a new mtime)."""
    table = Path(table)
    out, known = [], {}
    for where, seen in table_record(table).items():
        if not (Path(where).is_dir() and isinstance(seen, dict)):
            continue
        for d in schema.run_dirs(where):
            key = str(d.relative_to(where))
            known[str(d.resolve())] = True
            try:
                info = read_summary(d / schema.SUMMARY)
            except (OSError, DamagedSummary):
                continue
            if info.get("status") == schema.COMPLETED and seen.get(key) != stamp(info):
                out.append(d)
    try:
        made = table.stat().st_mtime
    except OSError:
        return out
    for d in schema.run_dirs(table.parent if root is None else root):
        if str(d.resolve()) in known:
            continue
        try:
            changed = (d / schema.SUMMARY).stat().st_mtime
            if changed <= made:
                continue
            info = read_summary(d / schema.SUMMARY)
            finished = _number(info, "finished_at")
        except (OSError, DamagedSummary):
            continue
        if info.get("status") == schema.COMPLETED and (finished or changed) > made:
            out.append(d)
    return out


def warn_if_stale(table, root=None, added=()) -> int:
    """One line on stderr when completed runs under root are newer than the table (a
    figure drawn from it would leave them out); returns how many. Runs under a folder of
    `added` are not counted: the caller reads them from there (plot's --add-runs)."""
    root = Path(table).parent if root is None else Path(root)
    added = [Path(a).resolve() for a in added]
    newer = [d for d in newer_runs(table, root)
             if not any(Path(d).resolve().is_relative_to(a) for a in added)]
    if newer:
        many = len(newer) > 1
        where = sorted(set(table_record(table)) | {str(root)})
        root = next((w for w in where if Path(newer[0]).resolve().is_relative_to(Path(w).resolve())),
                    root)
        print(f"warning: {len(newer)} completed run{'s' * many} under {root} finished after {table} "
              f"was written and {'are' if many else 'is'} not in it; re-collect first: "
              f"{spelled('collect')} {root} --out {table}", file=sys.stderr)
    return len(newer)


def diverged_seeds(table) -> dict[str, list[int]]:
    """{config hash: seeds} of the runs collect left out of the table as diverged (their
    folder's config hash and seed), from the table's record."""
    out: dict[str, list[int]] = {}
    for seen in table_record(table).values():
        for key, st in (seen.items() if isinstance(seen, dict) else ()):
            parts = Path(key).parts
            if len(parts) >= 2 and str(st).startswith(f"{schema.FAILED}|") \
                    and str(st).endswith(f"|{schema.DIVERGED}") and parts[-1].startswith("seed="):
                out.setdefault(parts[-2], []).append(int(parts[-1].split("=", 1)[1]))
    return {h: sorted(s) for h, s in out.items()}


def os_errors_in_one_line(main):
    """main(argv) with an OSError (a full disk, a read-only or vanished folder) said in one
    line on stderr and exit 1 instead of a traceback; every file goes through the atomic
    writer, so none is left half-written."""
    @functools.wraps(main)
    def guarded(argv=None) -> int:
        try:
            return main(argv)
        except OSError as e:
            print(f"error: {type(e).__name__}: {e}; no file left half-written", file=sys.stderr)
            return 1
    return guarded


def write_atomic(df: pd.DataFrame, out) -> None:
    """Through the project's one atomic writer: readers never see half a file."""
    io.write_parquet(Path(out), df)


@contextlib.contextmanager
def merge_lock(table):
    """Merges into one table one at a time: a POSIX lock (lockf) on `.<table>.lock` beside
    it, held from reading the table to renaming the new one into place, so a second
    `--merge-into` reads the first's result instead of the table both started from (each
    would otherwise drop the other's runs). A second waits, saying for whom; the lock file
    is opened without following a link."""
    path = Path(table)
    lock = path.with_name(f".{path.name}.lock")
    io.refuse_link(lock)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            print(f"waiting for the merge into {table} by {holder} to finish", file=sys.stderr, flush=True)
            fcntl.lockf(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # drops the lock


def duplicate_rows(df: pd.DataFrame) -> str | None:
    """None, or what names the ROW_KEY keys the table holds more than once (a table
    concatenated or edited by hand): a figure would average such rows as data."""
    twice = df.duplicated(ROW_KEY, keep=False)
    if not twice.any():
        return None
    keys = df.loc[twice, ROW_KEY].drop_duplicates()
    shown = "; ".join(f"{t}/{a} config {h} seed {s} step {st}" for t, a, h, s, st in
                      keys.head(5).itertuples(index=False))
    return (f"{int(twice.sum())} rows repeat a run's (task, algorithm, config, seed, step) with "
            f"{len(keys)} key{'s' * (len(keys) != 1)} held more than once: {shown}"
            f"{'; ...' if len(keys) > 5 else ''}")


def merge(existing: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple]]:
    """`new`'s runs into `existing` (a committed snapshot): a (config_hash, seed) in both is
    taken from `new` (a re-run or a finished resume), never kept twice. Columns of `new`
    that `existing` stores as float32 are stored so too (the snapshot is kept small that
    way). Returns the table and the replaced keys."""
    keys = ["config_hash", "seed"]
    new_keys = set(map(tuple, new[keys].drop_duplicates().itertuples(index=False)))
    old_keys = existing[keys].apply(tuple, axis=1)
    replaced = sorted(set(old_keys) & new_keys)
    new = new.copy()
    for col in new.columns.intersection(existing.columns):
        if existing[col].dtype == np.float32 and new[col].dtype == np.float64:
            new[col] = new[col].astype(np.float32)
    merged = pd.concat([existing[~old_keys.isin(new_keys)], new], ignore_index=True)
    return merged, replaced


def read_results(path, what: str = "nothing to work on", say=None,
                 legacy_runs: set | None = None, split_code: bool = False) -> pd.DataFrame | int:
    """The collected table, as plot and the paper report read it, or the exit status after
    a one-line error on stderr: 2 for nothing to work on (no file, no rows, not this
    table's columns), 1 for a file that cannot be read or a line pooling seeds of
    different code (check_code; split_code splits such lines instead). what: the
    consequence of an empty table; say: told the row count before the (long) read;
    legacy_runs: a set given here gets the (hash, seed) of each run the table holds under
    a legacy hash (re-keyed as read), for provenance."""
    path = Path(path)
    make = f"make it with `{spelled('collect')}` (or name another with --results)"
    if not path.is_file():
        print(f"error: results file {path} not found: {make}", file=sys.stderr)
        return 2
    try:
        n_rows = pq.ParquetFile(path).metadata.num_rows
        if say is not None:
            say(f"reading {path} ({n_rows:,} row{'s' * (n_rows != 1)})")
        df = pd.read_parquet(path)
    except Exception as e:  # a torn or foreign file: say which, not a traceback
        print(f"error: cannot read {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if df.empty:
        print(f"error: {path} has no rows: {what}; {make}", file=sys.stderr)
        return 2
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        print(f"error: {path} lacks the collected table's columns {', '.join(missing)}; {make}",
              file=sys.stderr)
        return 2
    raw = df[["config_hash", "seed"]] if legacy_runs is not None else None
    df, legacy = rekey_table(df)
    if why := duplicate_rows(df):
        print(f"error: {path}: {why}; collect the runs again into a new table", file=sys.stderr)
        return 1
    if legacy and raw is not None:  # (current hash, seed) of each run recorded under a legacy one
        old = raw[raw["config_hash"].isin(list(legacy))].drop_duplicates()
        legacy_runs.update((legacy[h], int(s)) for h, s in old.itertuples(index=False))
    if legacy:
        print(f"note: {path}: {len(legacy)} config hash{'es' * (len(legacy) != 1)} from before the "
              f"hash left the preset names re-keyed as read (analysis.rekey)", file=sys.stderr)
    df = check_code(df, split_code)
    return 1 if df is None else df


@os_errors_in_one_line
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=DEFAULT_ROOT, help=f"output root (default: {DEFAULT_ROOT}/)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"table to write (default: {DEFAULT_OUT})")
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="S",
                        help="a running run silent this long counts as killed (default: %(default)s)")
    parser.add_argument("--allow-skips", action="store_true",
                        help="write the table of the runs kept even if some were skipped, and exit 0")
    parser.add_argument("--merge-into", metavar="TABLE",
                        help="merge the runs into this existing table instead of writing --out "
                             "(a run already there is replaced by its copy from ROOT)")
    parser.add_argument("--split-code", action="store_true",
                        help="keep seeds of one config run under different code as separate "
                             "lines (labelled by code fingerprint) instead of refusing them")
    parser.add_argument("--prior-attempts", action="store_true",
                        help="also collect the earlier results on_code_change=rerun kept in run "
                             "directories (prior-attempt-<n>/), each line that holds one split "
                             "by code fingerprint and labelled so (tpo [code 1a2b3c4d])")
    parser.add_argument("--progress", action="store_true",
                        help=f"say how many run directories were read on stderr however fast "
                             f"(by default only past {PROGRESS_AFTER_S:g} s or {PROGRESS_MANY} runs)")
    args = parser.parse_args(argv)

    root = Path(args.root)
    if not root.is_dir():
        print(f"error: output root {root} does not exist", file=sys.stderr)
        return 2
    if args.merge_into and not Path(args.merge_into).is_file():
        print(f"error: --merge-into {args.merge_into}: no such table (merge into an existing one; "
              f"write a new one with --out)", file=sys.stderr)
        return 2
    started = time.monotonic()
    runs = find_runs(root, args.stale_after, Progress("summaries read", args.progress, started))
    if args.prior_attempts:
        runs += prior_attempts(runs)
    df, skipped = load_runs(runs, root, Progress("run directories read", args.progress, started))
    df = label_prior_lines(df)
    # Failed runs first, then the unfinished ones (resumable), then damaged files and
    # tables that are not what their summary says, then extra copies.
    for kinds, title in ((("failed",), "failed"), (("unreadable",), "unreadable"), (("running", "incomplete", "unknown"), "incomplete"),
                         (("corrupt",), "corrupt"), (("inconsistent",), "inconsistent"),
                         (("duplicate",), "duplicate")):
        group = [r for r in skipped if r.status in kinds]
        if group:
            print(f"{title} ({len(group)}):")
        for run in group:
            prefix = "warning: " if run.status in ("corrupt", "inconsistent") else ""
            print(f"  {prefix}skipped {(run.path / (run.prior or '')).relative_to(root)}: {run.reason}")
    if df.empty:
        print(f"error: no completed run found under {root} ({len(skipped)} skipped)", file=sys.stderr)
        return 1 if skipped else 2  # runs that failed or were refused, or nothing to collect
    kept = len(runs) - len(skipped)
    blocking = [r for r in skipped if r.status not in LEFT_OUT]
    if blocking and not args.allow_skips:
        # A run that says completed but whose files disagree is damage, not progress: a
        # table without it would read as a result. Say so and let the caller choose.
        print(f"error: {len(blocking)} run(s) damaged or inconsistent (listed above), {kept} "
              f"consistent; nothing written to {args.out}. Repair or remove them, or pass "
              f"--allow-skips to collect the {kept} alone", file=sys.stderr)
        return 1
    with merge_lock(args.merge_into) if args.merge_into else contextlib.nullcontext():
        if args.merge_into:
            try:
                existing = pd.read_parquet(args.merge_into)
            except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
                print(f"error: --merge-into {args.merge_into}: not a readable results table ({e}); "
                      f"nothing written", file=sys.stderr)
                return 1
            if lacking := [c for c in REQUIRED if c not in existing.columns]:
                print(f"error: --merge-into {args.merge_into}: not a results table (no column "
                      f"{', '.join(lacking)}); nothing written", file=sys.stderr)
                return 1
            if why := duplicate_rows(existing):
                print(f"error: {args.merge_into}: {why}; nothing written. Collect the runs again into "
                      f"a new table (--out) instead of merging into this one", file=sys.stderr)
                return 1
            df, replaced = merge(existing, df)
            args.out = args.merge_into
            if replaced:
                print(f"replaced {len(replaced)} run(s) already in {args.merge_into}: "
                      + ", ".join(f"{h} seed={s}" for h, s in replaced))
        df = check_code(df, args.split_code)
        if df is None:
            print(f"error: nothing written to {args.out}", file=sys.stderr)
            return 1
        record_collected(df, root, runs, table_record(args.merge_into) if args.merge_into else None)
        try:
            write_atomic(df, args.out)
        except OSError as e:
            print(f"error: cannot write {args.out}: {e}; nothing written", file=sys.stderr)
            return 1
    left = [r for r in skipped if r.status in LEFT_OUT]
    if left:
        failed = sum(r.status == "failed" for r in left)
        unreadable = sum(r.status == "unreadable" for r in left)
        print(f"left out {len(left)} run(s) not completed ({failed} failed, "
              f"{len(left) - failed - unreadable} unfinished"
              + (f", {unreadable} unreadable" if unreadable else "")
              + "; listed above): re-run them to add them")
    earlier = sum(r.prior is not None for r in runs) - sum(r.prior is not None for r in skipped)
    print(f"collected {kept} runs ({len(df)} rows"
          + (f"; {earlier} of them earlier results kept by on_code_change=rerun" if earlier else "")
          + f"), skipped {len(skipped)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
