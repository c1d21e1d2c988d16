import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# A few episodes of a tiny sequence task: every CLI test runs in seconds.
TINY = ["task=demo", "task.episodes=3", "task.batch_size=4", "task.sequence_length=3",
        "log_every=1", "threads=1"]


def run_bench(*args: str, cwd: Path = REPO, env: dict | None = None,
              check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_script(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(REPO / script), *args], cwd=REPO, text=True,
                          capture_output=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in Path(root).rglob("seed=*") if p.is_dir())


def wait_for(predicate, timeout: float = 180.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def metrics(run_dir: Path):
    """A run's metrics, timing aside (what must equal an uninterrupted run's)."""
    import pandas as pd
    return pd.read_parquet(run_dir / "metrics.parquet").drop(columns=["wall_s"])


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "outputs"


def compose(*overrides: str) -> dict:
    """The resolved config `python -m bench` would see, without a subprocess."""
    from tpo_bench.bench.config import compose as bench_compose

    return bench_compose(*overrides)
