"""Time `analysis/collect.py` over many small synthetic runs (a benchmark, not a test).

    python -m dev.bench_collect [--runs 5000] [--configs 500] [--steps 3] [--keep DIR]

Builds RUNS completed run directories shaped like the runner's (config.json, summary.json,
metrics.parquet of STEPS rows of the demo task under TPO), spread over CONFIGS config
hashes (learning rates differ), in a temporary folder; then runs collect on them in a
child process and prints one table row: runs, rows, wall and CPU (user + system) seconds
and the peak RSS of the child (CPU time is the figure to compare on a shared machine).
--collect names another collect.py (another checkout's, to compare).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
from tpo_bench.contract.identity import config_hash, flatten
from tpo_bench.contract import schema

CONFIG = {  # conf/task/demo.yaml under algo=tpo, shrunk as the tests shrink it
    "algo": {"anchor": True, "epochs": 4, "eta": 1.0, "impl": "tpo", "k": 8,
             "level": "sequence", "name": "tpo"},
    "match": "prompts", "match_k": 8,
    "optim": {"lr": 0.001, "name": "muon_nadam"},
    "task": {"batch_size": 4, "episodes": 3, "impl": "seq", "name": "demo",
             "reward": "bag_of_tokens", "sequence_length": 3, "target": "reverse_copy",
             "vocab_size": 4},
}


def write_run(root: Path, config: dict, seed: int, error, status: str | None = schema.COMPLETED,
              **summary) -> Path:
    """One run directory as the runner leaves it: metrics.parquet (a row per error value),
    config.json, summary.json (`summary` added to or replacing its fields; status=None:
    none, as a run stopped before its first record). The tests' fake runs, one writer."""
    h, steps = config_hash(config), len(error)
    d = schema.run_dir(root, config["task"]["name"], config["algo"]["name"], h, seed)
    d.mkdir(parents=True)
    metrics = {col: np.full(steps, np.nan) for col in schema.METRIC_COLUMNS}
    metrics.update(step=np.arange(steps), error=np.asarray(error, float),
                   rollouts=np.arange(1, steps + 1) * 32)
    df = pd.DataFrame({**metrics, "config_hash": h, "seed": seed, **flatten(config),
                       "batch_size_effective": 4, "lr_effective": config["optim"]["lr"],
                       "group_size_effective": 8, "experiment": None, "partial": False})
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), d / schema.METRICS)
    (d / schema.CONFIG).write_text(json.dumps({**config, "seed": seed}))
    if status is None:
        return d
    (d / schema.SUMMARY).write_text(json.dumps({
        "status": status, "config_hash": h, "seed": seed, "rows": steps, "reason": None,
        "git_commit": "0" * 40, "git_commits": ["0" * 40], "started_at": 0.0, "heartbeat": 0.0,
        "finished_at": 1.0, **summary}))
    return d


def demo_config(episodes: int = 3, lr: float = 1e-3) -> dict:
    config = json.loads(json.dumps(CONFIG))
    config["task"]["episodes"], config["optim"]["lr"] = episodes, lr
    return config


def build(root: Path, runs: int, configs: int, steps: int) -> int:
    """RUNS run directories under root; returns the number of rows written."""
    rng = np.random.default_rng(0)
    per_config = -(-runs // configs)
    for i in range(runs):
        c, seed = divmod(i, per_config)
        config = demo_config(steps, float(f"{1e-3 * (1 + c / configs):.6g}"))
        write_run(root, config, seed, rng.random(steps), code_fingerprint="f" * 16)
    return runs * steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5000)
    p.add_argument("--configs", type=int, default=500)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--collect", type=Path, default=REPO / "analysis" / "collect.py")
    p.add_argument("--keep", type=Path, help="build the runs here and keep them (an existing "
                   "folder, built with the same --runs/--configs/--steps, is timed as it is)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "outputs"
        t0 = time.perf_counter()
        if root.exists():  # a --keep folder built before: timed as it is
            rows = args.runs * args.steps
        else:
            rows = build(root, args.runs, args.configs, args.steps)
        built = time.perf_counter() - t0
        out = Path(tmp) / "results.parquet"
        env = {**os.environ, "PYTHONPATH": str(args.collect.resolve().parents[1])}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(args.collect), str(root), "--out", str(out)],
                              cwd=args.collect.resolve().parents[1], env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        rss_mb, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
            return proc.returncode
        n = len(pd.read_parquet(out))
    print(f"{'runs':>6} {'configs':>7} {'rows':>7} {'build s':>8} {'collect s':>10} "
          f"{'collect CPU s':>14} {'peak RSS MB':>12}")
    print(f"{args.runs:>6} {args.configs:>7} {rows:>7} {built:>8.1f} {wall:>10.1f} {cpu:>14.1f} "
          f"{rss_mb:>12.0f}")
    return 0 if n == rows else 1


if __name__ == "__main__":
    sys.exit(main())
