"""What a run leaves on disk, in one place: the run-directory layout and its parser, the
files inside a run, the status words of summary.json, and the metric columns of
metrics.parquet. The runner writes by these names; collect, plot, report and the sweepers
read by them.

    <output_root>/<task>/<algo>/<config hash>/seed=<n>/
        config.json       the resolved scientific config (what the hash is of) and the seed
        summary.json      status, provenance, attempts; `running`, heartbeats, the verdict
        metrics.parquet   one row per episode (or evaluation), METRIC_COLUMNS first
        checkpoint.pt     while unfinished
        .lock             held by the one process training it
        prior-attempt-<n>/  an earlier result under other code, kept by on_code_change=rerun

The names in the path are labels: the hash is of the science alone, so one config run
under two preset names is one run (`find_run` finds it under either).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# Where runs land unless a run says otherwise (RunConfig.output_root); collect reads it.
OUTPUT_ROOT = "outputs"
CONFIG, SUMMARY, METRICS, CHECKPOINT, LOCK = (
    "config.json", "summary.json", "metrics.parquet", "checkpoint.pt", ".lock")
# In a local sweep's directory (hydra.sweep.dir) while it runs: its existence stops the
# sweep at every run's next episode boundary (written on SIGINT/SIGTERM, or `touch`ed).
SWEEP_STOP = "STOP"

# summary.json "status": what a run directory can say of itself ...
COMPLETED, RUNNING, INTERRUPTED, FAILED = "completed", "running", "interrupted", "failed"
STATUSES = (COMPLETED, RUNNING, INTERRUPTED, FAILED)
# ... and what a sweep reports for a run this process did not touch (nothing written):
# another process holds it, a file in it was refused, or the sweep was stopped first.
HELD, REFUSED, NOT_STARTED = "held", "refused", "not started"
# summary.json "error_kind" of a failed run: a non-finite loss, the disk, anything else.
DIVERGED, IO_ERROR, ERROR = "diverged", "io", "error"
ERROR_KINDS = (DIVERGED, IO_ERROR, ERROR)

# The runner refreshes a running run's heartbeat at least every HEARTBEAT_S (and at each
# checkpoint); silence for STALE_AFTER_S means its process is gone (OOM killer, scancel, a
# dead node): the run is resumable, not running. collect and the sweep's progress line
# both judge it so.
HEARTBEAT_S = 30.0
STALE_AFTER_S = 600.0

# Every run writes these columns (NaN where a method or task does not define one), so
# tables from different algorithms concatenate into one tidy schema. The meaning of each
# is in the README's metric table.
METRIC_COLUMNS = (
    "step", "error", "reward_mean", "loss", "grad_norm", "param_change",
    "all_fail_frac", "zero_var_frac", "success_prompt_frac", "clip_frac", "kl",
    "q_success", "q_fail", "absA_success", "absA_fail", "misalignment", "train_error",
    "test_error", "rollouts", "wall_s",
    # the LLM family (tasks/llm.py): held-out pass@1 / pass@k at each evaluation, and per
    # step the mean completion length, token entropy, KL(pi_old || pi_ref), tokens generated
    "pass_at_1", "pass_at_k", "response_length", "entropy", "kl_ref", "tokens",
)
# Diagnostics that are NaN by definition where nothing is selected (no successful or no
# failed candidate in the batch; the group fractions of single samples). Every other
# number a row carries must be finite, and these never infinite: the runner ends a run
# that records one otherwise as diverged.
UNDEFINED_WHEN_EMPTY = ("all_fail_frac", "zero_var_frac", "q_success", "q_fail",
                        "absA_success", "absA_fail")
# science §Measurement: a group whose scores' population std is below this has zero variance
# (zero_var_frac); DAPO's dynamic sampling replaces such groups.
ZERO_VAR_STD = 1e-6

# Columns that identify a run's rows without being config: with METRIC_COLUMNS, never
# legend keys or config differences.
ROW_KEYS = ("config_hash", "seed", "partial")
# What the run really used after matching and the task's own rules (config says what was
# asked): constant per run, so per-run columns like the config's.
EFFECTIVE_COLUMNS = ("batch_size_effective", "group_size_effective", "lr_effective")
# Columns that describe but do not identify a run.
LABEL_COLUMNS = ("task.name", "algo.name", "experiment")

# Dataclass field metadata for a task's or algorithm's config fields (bench.build hashes
# the rest): where data comes from does not change the science; a knob added after runs
# existed is hashed only when set away from its default, so those runs keep their hashes.
NOT_IDENTITY = {"identity": False}
IF_SET = {"identity": "if_set"}

# The largest seed: the `seed` column of metrics.parquet is a 64-bit signed integer.
MAX_SEED = 2**63 - 1

SEED_DIR = re.compile(r"seed=(\d+)")
PRIOR_ATTEMPT = re.compile(r"prior-attempt-(\d+)")


def prior_attempt_dir(n: int) -> str:
    """The folder inside a run directory that keeps its result of attempt n when a code
    change trains it again (bench.runner.keep_prior)."""
    return f"prior-attempt-{n}"


def seed_dir(seed: int) -> str:
    """A run's folder name inside its config's folder (run_dir's last level)."""
    return f"seed={seed}"


def run_dir(output_root: str | Path, task: str, algo: str, config_hash: str, seed: int) -> Path:
    return Path(output_root) / task / algo / config_hash / seed_dir(seed)


@dataclass(frozen=True)
class RunPath:
    """The parts of a run directory's path."""

    task: str
    algo: str
    config_hash: str
    seed: int
    path: Path


def parse_run_dir(path: str | Path) -> RunPath | None:
    """RunPath of `.../<task>/<algo>/<hash>/seed=<n>`, or None for any other folder."""
    p = Path(path)
    m, up = SEED_DIR.fullmatch(p.name), p.absolute().parents
    if m is None or len(up) < 4:
        return None
    return RunPath(up[2].name, up[1].name, up[0].name, int(m.group(1)), p)


def _read_object(path: Path) -> dict | None:
    """A JSON object from `path`; None where absent; ValueError where unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path.name} cannot be read ({e})") from None
    try:
        obj = json.loads(text)
    except ValueError:
        raise ValueError(f"{path.name} is not valid JSON") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return obj


def path_disagreements(path: str | Path) -> list[str]:
    """Where a run directory's own files (config.json, summary.json) disagree with its
    path `<task>/<algo>/<config hash>/seed=<n>`: each a phrase naming the file, the field,
    its value and the path's ([] for a run where it belongs, or a folder that holds
    neither file yet). A run copied or planted elsewhere under the root, into another
    config's folder or under another seed, says so here."""
    from .identity import config_hash, legacy_hash

    where = parse_run_dir(path)
    if where is None:
        return [f"{path} is not a <task>/<algo>/<config hash>/seed=<n> folder"]
    out = []
    for name in (CONFIG, SUMMARY):
        try:
            info = _read_object(Path(path) / name)
        except ValueError as e:
            out.append(str(e))
            continue
        if info is None:
            continue
        if name == CONFIG:
            task, algo = info.get("task"), info.get("algo")
            claims = {"task": task.get("name") if isinstance(task, dict) else None,
                      "algo": algo.get("name") if isinstance(algo, dict) else None,
                      "seed": info.get("seed")}
            hashes = {config_hash(info), legacy_hash(info)}
            if where.config_hash not in hashes:
                out.append(f"{CONFIG} hashes to {config_hash(info)}, its folder is {where.config_hash}")
        else:
            claims = {k: info.get(k) for k in ("task", "algo", "seed", "config_hash")}
        for key, value in claims.items():
            mine = getattr(where, key)
            if value is not None and str(value) != str(mine):
                what = "task.name" if name == CONFIG and key == "task" else \
                    "algo.name" if name == CONFIG and key == "algo" else key
                out.append(f"{name} says {what} {value}, its path says {mine}")
    return out


def _walk(root: str | Path, depth: int | None = None,
          unreadable: list | None = None) -> Iterator[Path]:
    """Every folder under root (not root itself) down to `depth` levels, not descending into
    run directories. Symlinked folders are followed, each real folder entered once (a link
    back up the tree cannot loop), the tree's own folders before those reached by a link:
    the run directory a sweep finds through a link, collect finds too."""
    seen: set[tuple[int, int]] = set()

    def first_visit(path: Path) -> bool:
        st = path.stat()
        if (st.st_dev, st.st_ino) in seen:
            return False
        seen.add((st.st_dev, st.st_ino))
        return True

    own: list[tuple[Path, int]] = [(Path(root), 0)]
    linked: list[tuple[Path, int]] = []
    while own or linked:
        folder, level = own.pop() if own else linked.pop(0)
        try:
            if not first_visit(folder):
                continue
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except PermissionError as e:  # another user's folder (umask 077): said, not skipped silently
            if unreadable is not None:
                unreadable.append((folder, e))
            continue
        except OSError:  # gone meanwhile, a dangling link
            continue
        for entry in entries:
            path, run = Path(entry.path), SEED_DIR.fullmatch(entry.name)
            try:
                if not entry.is_dir() or (run and not first_visit(path)):
                    continue
                link = entry.is_symlink()
            except OSError:
                continue
            yield path
            if (depth is None or level + 1 < depth) and not run:
                (linked if link else own).append((path, level + 1))


def run_dirs(root: str | Path, unreadable: list | None = None) -> Iterator[Path]:
    """Every run directory under root (sorted), however deep the root sits above them,
    symlinked folders included (each real folder once). `unreadable`, where given, gets
    (folder, PermissionError) for each folder this user cannot list."""
    return iter(sorted(p for p in _walk(root, unreadable=unreadable) if SEED_DIR.fullmatch(p.name)))


def find_run(output_root: str | Path, config_hash: str, seed: int) -> Path | None:
    """The directory of (hash, seed) under output_root whatever names it was run under;
    None if there is none. A folder whose own files disagree with its path
    (path_disagreements: a copy planted or moved there) is not this run. With several (two names started it at once), the one whose
    summary says completed, else the first. Walks as run_dirs does (links followed)."""
    found = sorted(p for d in _walk(output_root, depth=2)
                   if len(d.relative_to(output_root).parts) == 2
                   for p in [d / config_hash / seed_dir(seed)]
                   if p.is_dir() and ((p / CONFIG).exists() or (p / SUMMARY).exists())
                   and not path_disagreements(p))
    done = [p for p in found if _says_completed(p / SUMMARY)]
    return (done or found or [None])[0]


def _says_completed(summary: Path) -> bool:
    try:
        return json.loads(summary.read_text()).get("status") == COMPLETED
    except (OSError, ValueError, AttributeError):  # absent, half-written, not an object
        return False
