"""What each commit adds to a clone: the objects reachable from it and not from its parent,
and their size as git stores them.

    python -m dev.history_growth REV [REV ...]     # e.g. 25ff8fc HEAD~3..HEAD

Packed objects count at their packed (compressed, possibly delta) size, loose ones at their
compressed size: a fresh `git gc` can only shrink the figure. A range A..B lists each commit
of it.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                          text=True, check=True).stdout


def added(commit: str, repo: Path = ROOT) -> tuple[int, int, dict]:
    """(objects, bytes on disk, bytes per top-level folder) that commit adds to its parent."""
    parents = _git(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:]
    listed = _git(repo, "rev-list", "--objects", commit, "--not", *parents).splitlines()
    names = dict((line.split(" ", 1) + [""])[:2] for line in listed)
    sizes = _git(repo, "cat-file", "--batch-check=%(objectname) %(objectsize:disk)",
                 stdin="\n".join(names) + "\n")
    total, by = 0, {}
    for line in sizes.splitlines():
        sha, size = line.split()
        total += int(size)
        where = names.get(sha, "").split("/")[0] or "(trees, commit)"
        by[where] = by.get(where, 0) + int(size)
    return len(names), total, by


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("revs", nargs="+", help="commits, or ranges A..B")
    p.add_argument("--repo", type=Path, default=ROOT)
    a = p.parse_args(argv)
    commits = []
    for rev in a.revs:
        commits += (_git(a.repo, "rev-list", "--reverse", rev).split() if ".." in rev
                    else [_git(a.repo, "rev-parse", rev).strip()])
    print("| commit | subject | objects | KiB added | largest parts (KiB) |")
    print("|---|---|---:|---:|---|")
    for c in commits:
        n, total, by = added(c, a.repo)
        subject = _git(a.repo, "log", "-1", "--format=%s", c).strip()[:70].replace("|", "/")
        parts = ", ".join(f"{k} {v / 1024:.0f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:3])
        print(f"| {c[:7]} | {subject} | {n} | {total / 1024:.0f} | {parts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
