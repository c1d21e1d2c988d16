"""Gather every completed run under an output root into one parquet table.

    python analysis/collect.py [ROOT] [--out FILE]

A run is a `<root>/<task>/<algo>/<config_hash>/seed=<n>/` directory. It is kept only if
its summary.json (written last by the runner) says "completed" and its metrics.parquet
reads cleanly; everything else is reported and skipped, never fatal.
"""
import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

DEFAULT_ROOT = "outputs"
DEFAULT_OUT = "outputs/results.parquet"  # where analysis/plot.py looks by default
# The runner refreshes a running run's heartbeat at least every 30 s and at each
# checkpoint; silence for longer than this means the process is gone (OOM killer,
# scancel, a dead node) and the run is only resumable, not running.
STALE_AFTER_S = 600.0


@dataclass
class RunInfo:
    path: Path  # the seed=<n> directory
    status: str  # "completed" | "failed" | "running" | "incomplete" | "unknown"
    reason: str | None  # why the run is skipped; None for completed runs

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.parquet"


def _classify(run_dir: Path, stale_after: float = STALE_AFTER_S) -> RunInfo:
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return RunInfo(run_dir, "incomplete", "incomplete (no summary.json)")
    try:
        info = json.loads(summary.read_text())
        status = info.get("status")
    except (OSError, ValueError, AttributeError) as e:
        return RunInfo(run_dir, "incomplete", f"incomplete (unreadable summary.json: {e})")
    if status == "completed":
        return RunInfo(run_dir, "completed", None)
    if status == "failed":
        return RunInfo(run_dir, "failed", f"failed: {info.get('reason')}")
    if status == "running":
        age = time.time() - float(info.get("heartbeat") or info.get("started_at") or 0)
        if age > stale_after:
            return RunInfo(run_dir, "incomplete", f"incomplete (heartbeat stale for {age:.0f} s: "
                                                  "killed from outside? re-run to resume)")
        return RunInfo(run_dir, "running", f"incomplete (running, heartbeat {age:.0f} s ago)")
    if status == "interrupted":
        return RunInfo(run_dir, "incomplete", f"incomplete (interrupted: {info.get('reason')}; "
                                              "re-run to resume)")
    return RunInfo(run_dir, "unknown", f"unknown status {status!r}")


def find_runs(root, stale_after: float = STALE_AFTER_S) -> list[RunInfo]:
    """Every seed=<n> directory under root, classified by its summary.json."""
    root = Path(root)
    run_dirs = sorted(p for p in root.rglob("seed=*") if p.is_dir())
    return [_classify(d, stale_after) for d in run_dirs]


def read_metrics(path: Path) -> pd.DataFrame:
    """Read one metrics.parquet; raises ValueError (or pyarrow's error) if it is unusable."""
    df = pd.read_parquet(path)
    missing = {"step", "error"} - set(df.columns)
    if missing:
        raise ValueError(f"missing columns {sorted(missing)}")
    if df.empty:
        raise ValueError("no rows")
    return df


def collect(root, stale_after: float = STALE_AFTER_S) -> tuple[pd.DataFrame, list[RunInfo]]:
    """(rows of all completed runs, skipped runs with their reasons)."""
    return load_runs(find_runs(root, stale_after))


def load_runs(runs: list[RunInfo]) -> tuple[pd.DataFrame, list[RunInfo]]:
    frames, skipped = [], []
    for run in runs:
        if run.status != "completed":
            skipped.append(run)
            continue
        if not run.metrics_path.is_file():
            skipped.append(RunInfo(run.path, "incomplete", "incomplete (no metrics.parquet)"))
            continue
        try:
            frames.append(read_metrics(run.metrics_path))
        except Exception as e:  # pyarrow raises several types for truncated/garbage files
            skipped.append(RunInfo(run.path, "corrupt", f"corrupt metrics.parquet: {e}"))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return df, skipped


def write_atomic(df: pd.DataFrame, out) -> None:
    """Write to a temp file next to `out`, then rename, so readers never see half a file."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: it would leave the result readable by its owner only.
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=DEFAULT_ROOT, help="output root (default: outputs/)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"table to write (default: {DEFAULT_OUT})")
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="S",
                        help="a running run silent this long counts as killed (default: %(default)s)")
    args = parser.parse_args(argv)

    root = Path(args.root)
    if not root.is_dir():
        print(f"error: output root {root} does not exist", file=sys.stderr)
        return 2
    runs = find_runs(root, args.stale_after)
    df, skipped = load_runs(runs)
    # Failed runs first, then the unfinished ones (resumable), then unreadable files.
    for kinds, title in ((("failed",), "failed"), (("running", "incomplete", "unknown"), "incomplete"),
                         (("corrupt",), "corrupt")):
        group = [r for r in skipped if r.status in kinds]
        if group:
            print(f"{title} ({len(group)}):")
        for run in group:
            prefix = "warning: " if run.status == "corrupt" else ""
            print(f"  {prefix}skipped {run.path.relative_to(root)}: {run.reason}")
    if df.empty:
        print(f"error: no completed run found under {root} ({len(skipped)} skipped)", file=sys.stderr)
        return 1
    write_atomic(df, args.out)
    print(f"collected {len(runs) - len(skipped)} runs ({len(df)} rows), skipped {len(skipped)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
