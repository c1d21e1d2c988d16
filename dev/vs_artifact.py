"""This harness's single run against the paper's JAX artifact (github.com/JeanKaddour/tpo,
imported from the path you give, never copied here), per CPU-second at one thread, on one
workload both run as written: reverse copy, terminal reward, H 10, V 2, B 100, TPO with
K 8 and 4 epochs, Muon at lr 1e-3, the 2-layer d 64 transformer, one seed.

    python -m dev.vs_artifact --artifact-src TPO/src --artifact-python JAXENV/bin/python \
        [--rounds 6] [--episodes 3] [--cpu 0] [--out reproduction/perf/vs_artifact.csv]
    python -m dev.vs_artifact --table reproduction/perf/vs_artifact.csv

Each round starts both sides as fresh processes, in alternating order, each pinned to one
core (taskset) and one thread. Inside each, warm-up is left out (ours: one episode; the
artifact: compiling its N-episode program, then one untimed call of it) and N episodes are
timed by process CPU time. Ratio = artifact CPU-s per episode / ours, per round; JAX's
compile time is reported apart.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL = 3.0  # artifact CPU-s / ours per episode
# The shared workload: reverse_h10 with conf/algo/tpo.yaml, and the artifact's
# transformer_rlvr preset (its TransformerRlvrConfig) restricted to TPO and one seed.
H, V, B, K, EPOCHS, ARTIFACT_LR = 10, 2, 100, 8, 4, 1e-4  # the artifact's Muon steps at 10x lr
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def child_ours(episodes: int) -> dict:
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    from tpo_bench.bench.build import build
    from tpo_bench.bench.config import compose
    from tpo_bench.bench.engine import train_episode
    from dev.speed import seed_policies

    spec = build(compose("algo=tpo", "task=reverse_h10"))
    t, a = spec.task, spec.algo
    assert (t.sequence_length, t.vocab_size, t.batch_size, spec.request.k, a.epochs) == (H, V, B, K, EPOCHS)
    (policy,), (opt,), (streams,) = seed_policies(spec, 1)
    train_episode(t, a, spec.request, policy, opt, streams)  # warm-up
    cpu, wall = [], []
    for _ in range(episodes):
        c0, w0 = time.process_time(), time.perf_counter()
        train_episode(t, a, spec.request, policy, opt, streams)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_s": sum(cpu) / episodes, "wall_s": sum(wall) / episodes, "episode_cpu_s": cpu,
            "version": torch.__version__}


def child_artifact(episodes: int, src: str) -> dict:
    sys.path.insert(0, src)
    import jax
    import jax.numpy as jnp
    from tpo.config import TransformerRlvrConfig
    from tpo.experiments._trial import _build_trial_run_fns

    c = TransformerRlvrConfig()
    assert (c.sequence_length, c.vocab_size, c.batch_size, c.k_candidates, c.ppo_epochs,
            c.learning_rate) == (H, V, B, K, EPOCHS, ARTIFACT_LR)
    # As its transformer_rlvr experiment calls run_trial for the grouped algorithms.
    fn = _build_trial_run_fns(("tpo",), c.sequence_length, c.vocab_size, episodes, c.batch_size,
                              c.learning_rate, c.eta, c.ppo_epsilon, c.ppo_epochs, c.k_candidates,
                              "reverse_copy", "terminal", tpo_eta=c.tpo_eta)["tpo"]
    seeds = jnp.arange(0, 1)
    c0, w0 = time.process_time(), time.perf_counter()
    program = fn.lower(seeds).compile()
    compile_cpu, compile_wall = time.process_time() - c0, time.perf_counter() - w0
    program(seeds).block_until_ready()  # warm-up
    c0, w0 = time.process_time(), time.perf_counter()
    program(seeds).block_until_ready()
    return {"cpu_s": (time.process_time() - c0) / episodes,
            "wall_s": (time.perf_counter() - w0) / episodes,
            "compile_cpu_s": compile_cpu, "compile_wall_s": compile_wall, "version": jax.__version__}


def run_child(side: str, args) -> dict:
    python = sys.executable if side == "ours" else args.artifact_python
    cmd = [python, str(Path(__file__).resolve()), "--child", side, "--episodes", str(args.episodes),
           "--artifact-src", str(args.artifact_src)]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(args.cpu), *cmd]
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"vs_artifact: the {side} side failed ({proc.returncode}): {tail}")
    out = json.loads(lines[-1][len("RESULT "):])
    out["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["process_wall_s"] = wall
    return out


def table(df) -> str:
    """Per round and, last, the median (min-max) over rounds."""
    lines = ["| round | first | ours CPU-s / ep | artifact CPU-s / ep | artifact / ours per CPU-s "
             "| ours wall-s / ep | artifact wall-s / ep | artifact / ours per wall-s "
             "| artifact compile CPU-s |",
             "|---|---|---|---|---|---|---|---|---|"]
    cols = ["ours_cpu_s", "artifact_cpu_s", "ratio_cpu", "ours_wall_s", "artifact_wall_s",
            "ratio_wall", "artifact_compile_cpu_s"]
    fmt = lambda c, v: f"{v:.2f}x" if c.startswith("ratio") else f"{v:.2f}"  # noqa: E731
    for _, r in df.iterrows():
        lines.append(f"| {r['round']} | {r['first']} | " + " | ".join(fmt(c, r[c]) for c in cols) + " |")
    lines.append("| median (min-max) | | " + " | ".join(
        f"{fmt(c, df[c].median())} ({df[c].min():.2f}-{df[c].max():.2f})" for c in cols) + " |")
    return "\n".join(lines)


def summary(df) -> str:
    r = df["ratio_cpu"]
    verdict = "met" if r.median() >= GOAL else "not met"
    return (f"artifact / ours per CPU-second at one thread: {r.median():.2f}x median "
            f"({r.min():.2f}-{r.max():.2f}) over {len(df)} rounds of {int(df['episodes'].iloc[0])} "
            f"episodes; goal {GOAL:g}x: {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact-src", type=Path, help="the artifact's src/ folder (holds tpo/)")
    ap.add_argument("--artifact-python", default=sys.executable,
                    help="a Python with the artifact's locked jax 0.9.2, jaxlib 0.9.2, flax 0.12.6 "
                         "and optax 0.2.8 (default: this one)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--episodes", type=int, default=3, help="timed episodes per side per round")
    ap.add_argument("--cpu", type=int, default=0, help="the core both sides are pinned to")
    ap.add_argument("--out", type=Path, default=Path("outputs/speed/vs_artifact.csv"))
    ap.add_argument("--table", type=Path, metavar="CSV", help="print the tables of a recorded CSV")
    ap.add_argument("--child", choices=["ours", "artifact"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    import pandas as pd

    if args.table:
        from dev import record
        df = pd.read_csv(args.table)
        print(table(df))
        print(summary(df))
        print(record.code_line(df))
        return 0
    if args.child:
        res = (child_ours(args.episodes) if args.child == "ours"
               else child_artifact(args.episodes, str(args.artifact_src)))
        print("RESULT " + json.dumps(res))
        return 0
    if args.episodes < 2:
        # One episode compiles a loop-free program, cheaper per episode than the loop a run is.
        sys.exit(f"vs_artifact: --episodes {args.episodes}: give at least 2")
    if args.artifact_src is None or not (args.artifact_src / "tpo" / "experiments" / "_trial.py").is_file():
        sys.exit(f"vs_artifact: --artifact-src {args.artifact_src}: no tpo/experiments/_trial.py "
                 "there (give the src/ folder of a checkout of github.com/JeanKaddour/tpo)")
    from dev import record
    rows = []
    for r in range(args.rounds):
        order = ("ours", "artifact") if r % 2 == 0 else ("artifact", "ours")
        res = {side: run_child(side, args) for side in order}
        o, a = res["ours"], res["artifact"]
        rows.append({"round": r, "first": order[0], "episodes": args.episodes,
                     "ours_cpu_s": o["cpu_s"], "artifact_cpu_s": a["cpu_s"],
                     "ratio_cpu": a["cpu_s"] / o["cpu_s"],
                     "ours_wall_s": o["wall_s"], "artifact_wall_s": a["wall_s"],
                     "ratio_wall": a["wall_s"] / o["wall_s"],
                     "artifact_compile_cpu_s": a["compile_cpu_s"],
                     "artifact_compile_wall_s": a["compile_wall_s"],
                     "ours_episode_cpu_s": " ".join(f"{v:.3f}" for v in o["episode_cpu_s"]),
                     "ours_process_cpu_s": o["process_cpu_s"], "artifact_process_cpu_s": a["process_cpu_s"],
                     "ours_process_wall_s": o["process_wall_s"],
                     "artifact_process_wall_s": a["process_wall_s"],
                     "load_avg_1m": os.getloadavg()[0], "cpu": args.cpu,
                     "taskset": bool(shutil.which("taskset")),
                     "torch": o["version"], "jax": a["version"]})
        print(f"round {r}: ours {o['cpu_s']:.3f}, artifact {a['cpu_s']:.3f} CPU-s/episode, "
              f"ratio {a['cpu_s'] / o['cpu_s']:.2f}x", flush=True)
    df = record.stamp(pd.DataFrame(rows))
    print(table(df))
    print(summary(df))
    print(record.code_line(df))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
