"""Two checkouts' single runs of the same configs, compared metric by metric: a change
to the training loop that must not move results runs this against the code before it.

    python -m dev.same_metrics --base /path/to/other/checkout [--out DIR] [--only NAME ...]

Each config (CONFIGS; short runs, one thread) is run by `python -m bench` in each checkout
(its own code: the command's working directory), into DIR/<checkout>/<name>; then every
column of metrics.parquet except the clocks (wall_s) must be equal bit for bit, NaN for NaN.
Exit status 1 when any differs. The runs write only under DIR (default a temporary folder).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
ONE = ["threads=1", "log_every=0"]
# name -> overrides: the paper's sequence task under TPO and GRPO, the demo task under an
# algorithm with epochs' metrics (PPO) and one with dynamic sampling (DAPO), MNIST
# (held-out evaluation rows) on a generated data set, and the tabular bandits (an
# action-set group, a sampled group, exact single samples).
CONFIGS = {
    "reverse_h10_tpo": ["task=reverse_h10", "algo=tpo", "task.episodes=4"],
    "reverse_h10_grpo": ["task=reverse_h10", "algo=grpo", "task.episodes=4"],
    "demo_tpo": ["task=demo", "algo=tpo", "task.episodes=5"],
    "demo_ppo": ["task=demo", "algo=ppo", "task.episodes=5"],
    "demo_dapo": ["task=demo", "algo=dapo", "task.episodes=5"],
    "mnist_tpo": ["task=mnist", "algo=tpo", "task.episodes=5", "task.eval_every=2",
                  "task.batch_size=10"],
    "tabular_single_tpo": ["task=tabular_single", "algo=tpo", "task.episodes=40"],
    "tabular_single_grpo": ["task=tabular_single", "algo=grpo", "task.episodes=40"],
    "tabular_multi_pg": ["task=tabular_multi", "algo=pg", "task.episodes=40"],
}
CLOCKS = {"wall_s"}


def _mnist_data(folder: Path) -> Path:
    """A small valid MNIST set (tests/test_data.py's fixture) under `folder`."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_data import make_mnist
    make_mnist(folder)
    return folder


def run(checkout: Path, name: str, out: Path, data: Path) -> pd.DataFrame:
    overrides = [*CONFIGS[name], *ONE, f"output_root={out}"]
    if name.startswith("mnist"):
        overrides.append(f"task.data_dir={data}")
    proc = subprocess.run([sys.executable, "-m", "bench", *overrides], cwd=checkout,
                          text=True, capture_output=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"{checkout}: {name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    [table] = sorted(out.rglob("metrics.parquet"))
    return pd.read_parquet(table)


def differences(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """Every column (clocks aside) where the two tables differ, bitwise."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"columns or rows differ: {list(a.columns)} x{len(a)} vs {list(b.columns)} x{len(b)}"]
    out = []
    for c in a.columns:
        if c in CLOCKS:
            continue
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype.kind == "f" and y.dtype.kind == "f":
            same = np.array_equal(x.view(np.int64), y.view(np.int64)) if x.dtype == y.dtype == np.float64 \
                else np.array_equal(x, y, equal_nan=True)
        else:
            same = [str(v) for v in x] == [str(v) for v in y]
        if not same:
            out.append(f"{c}: {x.tolist()} vs {y.tolist()}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, required=True, help="the other checkout (its repository root)")
    p.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    p.add_argument("--only", nargs="*", default=sorted(CONFIGS), choices=sorted(CONFIGS))
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="same_metrics_"))
    data = _mnist_data(out / "mnist")
    bad = 0
    for name in args.only:
        tables = [run(c, name, out / side / name, data) for side, c in (("base", args.base), ("this", REPO))]
        diff = differences(*tables)
        cols = len(tables[0].columns) - len(CLOCKS & set(tables[0].columns))
        print(f"{name}: {'SAME' if not diff else 'DIFFERENT'} ({len(tables[0])} rows x {cols} columns)")
        for d in diff:
            print(f"  {d}")
        bad += bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
