"""Resumable runs: the whole state of a run in one file, written atomically, loaded
without unpickling arbitrary objects, and resumed only by the run it belongs to.

A checkpoint holds the model, the optimizer (moments and step counts), the three random
streams and the metrics rows so far, so a run restarted from it continues exactly as if
it had never stopped. It also holds the identity of the run that wrote it (config hash,
seed, episodes, torch version, git commit): a checkpoint copied from another config,
seed or run length is refused rather than resumed under this run's label.
"""
from __future__ import annotations

import time
from io import BytesIO
from pathlib import Path
from typing import Any

import torch

from ..contract import io
from ..contract.schema import CHECKPOINT, CONFIG

VERSION = 1
# A mismatch in any of these means the checkpoint is another run's trajectory (or, for
# torch, one that would not continue bit for bit).
MUST_MATCH = ("config_hash", "seed", "episodes", "torch")


class CheckpointError(ValueError):
    """A checkpoint that must not be resumed; the message names the file and the remedy."""


REMEDY = "force=true restarts this run from step 0 (and removes the checkpoint)"


def save(run_dir: Path, state: dict[str, Any], pause_s: float = 0.0) -> None:
    """Through the one atomic writer: a kill at any moment leaves the previous checkpoint
    or the new one, never a torn file; a failed write (a full disk) leaves no temp file.
    `pause_s` holds the temp file before the rename (test-only: lets a test kill a run
    mid-write)."""
    buffer = BytesIO()  # serialised first: torch.save reports a full disk as a RuntimeError
    torch.save({"version": VERSION, **state}, buffer)
    with io.atomic_file(run_dir / CHECKPOINT) as f:
        f.write(buffer.getbuffer())
        f.flush()
        if pause_s:
            time.sleep(pause_s)


def load(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CHECKPOINT
    io.refuse_link(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, garbage, or an arbitrary pickle: never unpickle it
        # torch's own text for a refused unpickle advises weights_only=False: not for us
        first = (str(e).strip().splitlines() or [""])[0]
        detail = type(e).__name__ + (f": {first[:160]}" if first and "weights_only" not in first else "")
        raise CheckpointError(f"{path} is damaged or not a tpo-bench checkpoint "
                              f"({detail}); {REMEDY}") from None
    if not isinstance(state, dict) or state.get("version") != VERSION:
        got = state.get("version") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path}: checkpoint version {got!r} is not {VERSION}; {REMEDY}")
    return state


def check_identity(run_dir: Path, state: dict[str, Any], ours: dict[str, Any],
                   allow_code_change: bool) -> list[str]:
    """Refuse (CheckpointError) a checkpoint written by another run; return notes to print.
    `ours` has the MUST_MATCH fields and git_commit. A checkpoint from before identity
    was recorded is resumed only if the run directory's own config.json has this run's
    config hash and seed (it cannot tell a file copied in from elsewhere)."""
    path = run_dir / CHECKPOINT
    theirs = state.get("identity")
    if theirs is None:
        from ..contract.identity import config_hash
        try:
            config = io.read_json_object(run_dir / CONFIG)
        except (OSError, io.DamagedFile) as e:
            raise CheckpointError(f"{path} records no identity and {e}; {REMEDY}") from None
        found = {"config_hash": config_hash(config), "seed": config.get("seed")}
        for field, value in found.items():
            if value != ours[field]:
                raise CheckpointError(f"{path} records no identity and the directory's "
                                      f"config.json has {field} {value!r}, this run's is "
                                      f"{ours[field]!r}; {REMEDY}")
        if state.get("next_step", 0) > ours["episodes"]:
            raise CheckpointError(f"{path} is at step {state['next_step']}, past this run's "
                                  f"{ours['episodes']} episodes; {REMEDY}")
        return ["checkpoint predates identity records: resumed because the directory's "
                "config.json has this run's config hash and seed"]
    wrong = [f"its {field} is {theirs.get(field)!r}, this run's is {ours[field]!r}"
             for field in MUST_MATCH if theirs.get(field) != ours[field]]
    if wrong:
        raise CheckpointError(f"{path} belongs to another run: {'; '.join(wrong)}; {REMEDY}")
    if theirs.get("git_commit") != ours["git_commit"]:
        if not allow_code_change:
            raise CheckpointError(
                f"{path} was written under git commit {theirs.get('git_commit')!r}, this code "
                f"is {ours['git_commit']!r} and resume_across_commits=false; check out that "
                f"commit, set resume_across_commits=true (the change is recorded), or {REMEDY}")
        return [f"resuming across a code change: checkpoint written under "
                f"{theirs.get('git_commit')}, now {ours['git_commit']} (recorded in summary.json)"]
    return []


def clear(run_dir: Path) -> None:
    (run_dir / CHECKPOINT).unlink(missing_ok=True)
