"""The project's written standards, read from the tracked files: module docstrings say what
and why in at most 15 lines, a preset's description is at most 3 comment lines, and issue
numbers and paths outside the repository live in CHANGELOG.md only."""
import ast
import re
import subprocess

import pytest

from conftest import REPO


def tracked(*patterns: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.split()


@pytest.mark.slow  # starts a process
def test_module_docstrings_are_at_most_15_lines():
    long = {}
    for f in tracked("*.py"):
        doc = ast.get_docstring(ast.parse((REPO / f).read_text()))
        if doc and len(doc.splitlines()) > 15:
            long[f] = len(doc.splitlines())
    assert not long, long


@pytest.mark.slow  # starts a process
def test_preset_descriptions_are_at_most_3_lines():
    long = {}
    for f in tracked("conf/*.yaml"):
        lines = [l for l in (REPO / f).read_text().splitlines() if not l.startswith("# @package")]
        header = 0
        while header < len(lines) and lines[header].startswith("#"):
            header += 1
        if header > 3:
            long[f] = header
    assert not long, long


@pytest.mark.slow  # starts a process
def test_no_issue_numbers_or_outside_paths_but_in_the_changelog():
    pattern = re.compile(r"issue [0-9]+|\.\./shared", re.I)
    found = [f for f in tracked() if f != "CHANGELOG.md" and (REPO / f).is_file()
             and (REPO / f).stat().st_size < 2_000_000
             and pattern.search((REPO / f).read_text(errors="ignore"))]
    assert not found, found
