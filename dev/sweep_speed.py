"""Time a sweep's up-front validation (a benchmark, not a test).

    python -m dev.sweep_speed [--jobs 1000 10000 40000] [--seeds-per-job S] [--out CSV]
    python -m dev.sweep_speed --table CSV

For each N, `python -m bench -m seed=range(0,N*S,S) seeds_per_job=S dry_run=true` (one
config of the demo task, N jobs, nothing launched) runs in a child process; one table row
per N: its wall and CPU (user + system) seconds, and the CPU milliseconds each job beyond
the smallest N's added (flat when validation is linear in the jobs; CPU time is the figure
to compare on a shared machine); --out also records the CPU model, its cores and the load
average at the end. tests/test_validation.py counts the same work instead of timing it.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from dev import record

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def time_dry_run(jobs: int, per_job: int, root: Path) -> dict:
    """One dry run of `jobs` jobs in a child process: wall and CPU seconds. In a checkout
    the child runs from its root (its own code); installed, from `root`'s folder."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench", "-m", f"seed=range(0,{jobs * per_job},{per_job})",
                           f"seeds_per_job={per_job}", "dry_run=true", f"output_root={root}"],
                          cwd=REPO if (REPO / "pyproject.toml").is_file() else root.parent,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or f"[dry run] {jobs} valid jobs" not in proc.stdout:
        raise RuntimeError(f"the dry run of {jobs} jobs failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"jobs": jobs, "seeds_per_job": per_job, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def table(df: pd.DataFrame) -> str:
    """The rows as Markdown, with the CPU milliseconds per job beyond the first row's."""
    lines = ["| jobs | seeds per job | wall s | CPU s | CPU ms per added job |", "|---|---|---|---|---|"]
    first = df.iloc[0]
    for _, r in df.iterrows():
        added = r["jobs"] - first["jobs"]
        per = f"{1000 * (r['cpu_s'] - first['cpu_s']) / added:.2f}" if added else ""
        lines.append(f"| {int(r['jobs']):,} | {int(r['seeds_per_job'])} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s']:.1f} | {per} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000, 40000], metavar="N")
    p.add_argument("--seeds-per-job", type=int, default=1, metavar="S")
    p.add_argument("--out", type=Path, help="also write the rows to this CSV")
    p.add_argument("--table", type=Path, metavar="CSV", help="print the table of a CSV written before")
    args = p.parse_args(argv)
    if args.table is not None:
        df = pd.read_csv(args.table)
        print(f"{table(df)}\n\n{record.code_line(df)}")
        return 0
    bad = [n for n in args.jobs if n < 1]
    if bad or args.seeds_per_job < 1:
        p.error(f"--jobs and --seeds-per-job must be positive (got --jobs {args.jobs}, "
                f"--seeds-per-job {args.seeds_per_job})")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [time_dry_run(n, args.seeds_per_job, Path(tmp) / "out") for n in sorted(args.jobs)]
    df = record.stamp(pd.DataFrame(rows).assign(cpu=cpu_model(), cores=os.cpu_count(),
                                                load_average=round(os.getloadavg()[0], 1)))
    print(f"machine: {df['cpu'][0]}, {df['cores'][0]} cores, load average {df['load_average'][0]}")
    print(table(df))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
