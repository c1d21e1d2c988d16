"""Which verdicts a rule change moved: the report regenerated with the rules before and
after a commit, on one results table, row by row.

    python analysis/paper/rule_log.py COMMIT [COMMIT ...] [--results FILE] [--add-runs ROOT]
                                      [--worktree]
    python -m analysis.paper.rule_log ...

For each COMMIT it extracts what the report is computed from (TREE) at COMMIT^ and at
COMMIT (`git archive`, into a temporary folder), writes both reports without figures, each
with its own tree's code (the driver refuses any other, such as an installed tpo_bench),
and prints every row whose verdict differs, as markdown. --worktree
compares HEAD with the working tree instead: run it before committing a rule change and
paste its output into the commit message. A rule judged on data it was changed after
must say what it moved; this is how the report's rule-change log is computed.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis.paper  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis.paper"
from . import pages

ROOT = Path(__file__).resolve().parents[2]
TREE = ("tpo_bench", "analysis", "conf", "contract", "tasks", "algorithms", "bench", "tools", "integrations")
SECTION = re.compile(r"^## .*\(`(\w+)`\)\s*$")
# Number rows are keyed by what the paper printed and where; claim rows by the claim.
NUMBER_KEY = ["citation", "setting", "algorithm", "metric", "paper"]
CLAIM_KEY = ["citation", "claim"]  # a claim keeps its identity when its metric is redefined


def verdict_rows(markdown: str) -> pd.DataFrame:
    """Every verdict of a report: section, key (the row's identity) and verdict."""
    out, section, header = [], None, None
    for line in markdown.splitlines():
        m = SECTION.match(line)
        if m:
            section, header = m.group(1), None
            continue
        if section is None or not line.startswith("|"):
            header = None
            continue
        cells = [c.replace("\\|", "|") for c in pages.cells(line)]  # keys read as printed
        if header is None:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        row = dict(zip(header, cells))
        if "verdict" not in row:
            continue
        key_cols = NUMBER_KEY if "algorithm" in row else CLAIM_KEY
        if not all(k in row for k in key_cols):
            continue
        out.append({"section": section, "key": " · ".join(row[k] for k in key_cols),
                    "verdict": row["verdict"]})
    return pd.DataFrame(out, columns=["section", "key", "verdict"]).drop_duplicates(["section", "key"])


def moves(before: str, after: str) -> pd.DataFrame:
    """Rows present in both reports whose verdict changed."""
    b, a = verdict_rows(before), verdict_rows(after)
    both = b.merge(a, on=["section", "key"], suffixes=("_before", "_after"))
    return both[both["verdict_before"] != both["verdict_after"]].reset_index(drop=True)


def moves_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "(no verdict moved)"
    return "\n".join(f"- `{r.section}` {r.key}: {r.verdict_before} → {r.verdict_after}"
                     for r in table.itertuples())


_DRIVER = """
import os, sys
from pathlib import Path
tree = os.path.realpath(sys.argv[1])
sys.path.insert(0, tree)
package = "tpo_bench.analysis" if os.path.isdir(os.path.join(tree, "tpo_bench")) else "analysis"
if os.path.isfile(os.path.join(tree, "analysis", "paper", "report.py")):
    package += ".paper"
figures = __import__(package + ".figures", fromlist=["x"])
report = __import__(package + ".report", fromlist=["x"])
if not os.path.realpath(report.__file__).startswith(tree + os.sep):
    sys.exit(f"rule_log: the report imported from {report.__file__}, not from the tree {tree}")
def no_figure(*a, **k):
    raise figures.NoData("figures skipped")
def named(name, df, out_dir, *a, **k):  # verdicts never depend on a figure: name, not draw
    os.makedirs(out_dir, exist_ok=True)
    return [Path(out_dir) / f"{name}.png", Path(out_dir) / f"{name}.pdf"]
figures.draw = no_figure
if hasattr(figures, "draw_seed_distributions"):
    figures.draw_seed_distributions = lambda groups, title, out_dir, *a, **k: named(
        getattr(figures, "SEEDS_FIGURE", "seeds"), None, out_dir)
try:
    paper_figures = __import__(package + ".paper_figures", fromlist=["x"])
    paper_figures.draw = named
except ImportError:  # a tree from before the paper's own figure forms
    pass
extra = [a for root in sys.argv[5:] for a in ("--add-runs", root)]
sys.exit(report.main(["--results", sys.argv[2], "--out", sys.argv[3], "--findings", sys.argv[4], *extra]))
"""


def report_at(tree: Path, results: Path, out: Path, add_runs=()) -> str:
    """The report a tree holding TREE writes for results and the runs under add_runs
    (no figures)."""
    empty = out.with_suffix(".findings.md")
    empty.write_text("")
    subprocess.run([sys.executable, "-c", _DRIVER, str(tree), str(results), str(out), str(empty),
                    *map(str, add_runs)],
                   check=True, cwd=tree, stdout=subprocess.DEVNULL)
    return out.read_text()


def extract(commit: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    present = [part for part in TREE if subprocess.run(
        ["git", "cat-file", "-e", f"{commit}:{part}"], cwd=ROOT, capture_output=True).returncode == 0]
    archive = subprocess.run(["git", "archive", commit, *present], cwd=ROOT,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="*", help="rule-changing commits")
    parser.add_argument("--results", default="reproduction/results.parquet")
    parser.add_argument("--worktree", action="store_true", help="HEAD against the working tree")
    parser.add_argument("--add-runs", action="append", default=[], metavar="ROOT",
                        help="also the completed runs under ROOT, as the report's --add-runs")
    args = parser.parse_args(argv)
    results = Path(args.results).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="rule_log_"))
    try:
        pairs = [(f"{c}^", c) for c in args.commits]
        if args.worktree:
            pairs.append(("HEAD", None))
        for i, (old, new) in enumerate(pairs):
            add = [Path(r).resolve() for r in args.add_runs]
            before = report_at(extract(old, tmp / f"{i}a"), results, tmp / f"{i}a.md", add)
            if new is None:
                tree = tmp / f"{i}b"
                tree.mkdir()
                for part in TREE:
                    if (ROOT / part).is_dir():
                        shutil.copytree(ROOT / part, tree / part, symlinks=True,
                                        ignore=shutil.ignore_patterns("__pycache__"))
            else:
                tree = extract(new, tmp / f"{i}b")
            after = report_at(tree, results, tmp / f"{i}b.md", add)
            found = moves(before, after)
            title = new or "working tree"
            print(f"### {title}: {len(found)} verdict(s) moved\n\n{moves_markdown(found)}\n", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
