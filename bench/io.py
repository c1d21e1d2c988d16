"""Atomic writes and the provenance recorded in summary.json."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd

REPO_ROOT = Path(__file__).resolve().parent.parent


def _atomic(path: Path, write) -> None:
    """Write through a temp file in the same folder, then rename: a reader never sees a
    half-written file, whatever kills the process."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: Path, obj: Any) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
    _atomic(path, w)


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    _atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("tpo-bench", "torch", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def git_commit() -> str | None:
    try:
        sha = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None
