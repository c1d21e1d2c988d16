"""Resumable runs (issue 5): the whole state of a run in one file, written atomically,
loaded without unpickling arbitrary objects.

A checkpoint holds the model, the optimizer (moments and step counts), the three random
streams and the metrics rows so far, so a run restarted from it continues exactly as if
it had never stopped.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

CHECKPOINT = "checkpoint.pt"
VERSION = 1


def save(run_dir: Path, state: dict[str, Any], pause_s: float = 0.0) -> None:
    """torch.save into a temp file, then rename: a kill at any moment leaves either the
    previous checkpoint or the new one, never a torn file. `pause_s` holds the temp file
    open before the rename (test-only: lets a test kill a run mid-write)."""
    path = run_dir / CHECKPOINT
    tmp = run_dir / f".{CHECKPOINT}.{os.getpid()}.tmp"
    torch.save({"version": VERSION, **state}, tmp)
    if pause_s:
        time.sleep(pause_s)
    os.replace(tmp, path)


def load(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {state.get('version')} is not {VERSION}")
    return state


def clear(run_dir: Path) -> None:
    """Remove the checkpoint and any temp file a killed write left behind."""
    for p in run_dir.glob(f".{CHECKPOINT}.*.tmp"):
        p.unlink(missing_ok=True)
    (run_dir / CHECKPOINT).unlink(missing_ok=True)


def clear_stale_temps(run_dir: Path) -> None:
    for p in run_dir.glob(".*.tmp"):
        p.unlink(missing_ok=True)
