"""Helpers of the run-integrity tests: a run started in a subprocess, its output read line
by line, and the uninterrupted reference run whose metrics a resumed run must equal."""
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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


_interrupted: dict[tuple[str, ...], Path] = {}  # args -> an output root holding one, per process


def interrupted_run(root: Path, *args: str) -> Path:
    """A run with a checkpoint at step 3, as a kill leaves it, copied into root: killed once
    per test process for each `args` (a copy resumes and is refused as the original is)."""
    if args not in _interrupted:
        made = Path(tempfile.mkdtemp(prefix="interrupted-"))
        atexit.register(shutil.rmtree, made, True)
        p = start(*SLOW, *args, "debug.sleep=0.3", f"output_root={made}")
        wait_for(lambda: list(made.rglob("checkpoint.pt")))
        p.send_signal(signal.SIGKILL)
        p.wait()
        _interrupted[args] = made
    shutil.copytree(_interrupted[args], root, dirs_exist_ok=True)
    return the_run(root)


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """The metrics of SLOW run once without a stop (once per test process)."""
    root = tmp_path_factory.mktemp("ref")
    run_bench(*SLOW, f"output_root={root}")
    return metrics(the_run(root))
