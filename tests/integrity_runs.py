"""Helpers of the run-integrity tests: a run started in a subprocess, its output read line
by line, and the uninterrupted reference run whose metrics a resumed run must equal."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, TINY, metrics, run_bench, run_dirs, wait_for

SLOW = [*TINY, "task.episodes=12", "checkpoint_every=3"]


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})


def wait_line(p: subprocess.Popen, text: str) -> None:
    """Read the process's output until a line contains `text`."""
    for line in p.stdout:
        if text in line:
            return
    raise AssertionError(f"{text!r} never printed")


def the_run(root: Path) -> Path:
    [d] = run_dirs(root)
    return d


def interrupted_run(root: Path, *args: str) -> Path:
    """A run with a checkpoint at step 3, as a kill leaves it."""
    p = start(*SLOW, *args, "debug.sleep=0.3", f"output_root={root}")
    wait_for(lambda: list(root.rglob("checkpoint.pt")))
    p.send_signal(signal.SIGKILL)
    p.wait()
    return the_run(root)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The metrics of SLOW run once without a stop (once per test module)."""
    root = tmp_path_factory.mktemp("ref")
    run_bench(*SLOW, f"output_root={root}")
    return metrics(the_run(root))
