"""The fast tier's promise, checked: a test not marked slow that starts a process fails."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs pytest in a subprocess

INNER = '''
import multiprocessing
import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def spawned_once():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_plain():
    assert sum(range(4)) == 6


def test_run():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_system():
    os.system("true")


def test_swallowed():
    try:
        subprocess.check_output([sys.executable, "-c", "raise SystemExit(3)"])
    except Exception:
        pass


def test_fork():
    process = multiprocessing.get_context("fork").Process(target=int)
    process.start()
    process.join()


def test_fixture(spawned_once):
    pass


@pytest.mark.slow
def test_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


def outcomes(tmp_path: Path, *args: str) -> dict[str, str]:
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    slow: spawns a subprocess\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "-rA", "-p", "no:xdist", *args], cwd=tmp_path, text=True,
                          capture_output=True, timeout=300)
    found = {}
    for line in proc.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            name = rest.split("::")[1].split(" ")[0]
            found[name] = found.get(name, word) if word == "PASSED" else word
    return found


def test_a_fast_test_that_starts_a_process_fails(tmp_path: Path) -> None:
    assert outcomes(tmp_path) == {
        "test_plain": "PASSED", "test_run": "FAILED", "test_system": "FAILED",
        "test_swallowed": "FAILED", "test_fork": "FAILED", "test_fixture": "ERROR",
        "test_marked": "PASSED"}


def test_the_fast_tier_runs_only_what_starts_nothing(tmp_path: Path) -> None:
    found = outcomes(tmp_path, "-m", "not slow", "-k", "plain or marked")
    assert found == {"test_plain": "PASSED"}
