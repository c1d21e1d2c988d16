"""The repository as a clone sees it: what is tracked, and what a commit adds."""
import os
import subprocess

import pytest

pytestmark = pytest.mark.slow  # git subprocesses

from conftest import REPO
from dev import history_growth


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_no_tracked_file_is_one_the_ignore_rules_exclude():
    """An ignore rule added after a file was committed does not untrack it: every later
    regeneration would add that file to the history again."""
    got = _git(REPO, "ls-files", "-ci", "--exclude-standard")
    if got.returncode != 0:
        pytest.skip("not a git checkout")
    assert not got.stdout.split(), got.stdout.split()[:10]


def test_history_growth_counts_what_a_commit_adds(tmp_path):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, env=env, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "small.txt").write_text("x\n")
    run("add", "."), run("commit", "-qm", "one")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "big.bin").write_bytes(os.urandom(50_000))  # incompressible
    run("add", "."), run("commit", "-qm", "two")
    n, total, by = history_growth.added("HEAD", tmp_path)
    assert n == 4  # commit, root tree, tree b, the blob; a/ is unchanged
    assert 50_000 <= by["b"] <= 51_000 and total >= by["b"]
    assert "a" not in by
