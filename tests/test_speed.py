"""The speed benchmark runs and reports what issue 6 asks (numbers live in the README)."""
import subprocess
import sys

import pandas as pd

from bench.speed import transformer_flops_per_token
from conftest import REPO


def test_flop_count_by_hand():
    # 2 layers x (4 d^2 + 8 d^2) multiply-adds + d V for the head, 2 FLOPs each, plus
    # attention 2 layers x 4 ctx d
    assert transformer_flops_per_token(V=2, d=64, ctx=10) == 2 * (2 * 12 * 64 * 64 + 128) + 2 * 4 * 10 * 64


def test_speed_benchmark_table(tmp_path):
    out = tmp_path / "speed.csv"
    proc = subprocess.run([sys.executable, "-m", "bench.speed", "--episodes", "1", "--warmup", "0",
                           "--threads", "1", "--cases", "dg:reversal_v2", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(out)
    assert list(df["algo"]) == ["tpo (eager yardstick)", "dg"]
    for col in ("episodes_per_s", "ms_generation", "ms_old_logprobs", "ms_training",
                "ms_bookkeeping", "gflops_per_s", "frac_of_matmul", "cpu", "cores", "gpu"):
        assert col in df.columns
    assert (df["episodes_per_s"] > 0).all() and (df["frac_of_matmul"] > 0).all()
    eager = df.iloc[0]
    assert eager["ms_old_logprobs"] > 0  # the yardstick re-forwards for p_old ...
    assert df.iloc[1]["ms_old_logprobs"] == 0  # ... the harness reuses the rollout's
    assert "machine:" in proc.stdout
