"""Speed benchmark (issue 6): `python -m bench.speed [--episodes N] [--threads T ...]`.

Times each algorithm on its representative task after warm-up and prints a table:
episodes/s, ms per phase (generation, old log-probs, training epochs, bookkeeping),
achieved GFLOP/s against the machine's measured fp32 matmul rate at the training shapes,
and the machine. It also times a plain eager TPO episode -- full re-forward per
generated token, a separate forward for the old log-probs, every prompt recomputed for
each of its K answers -- kept here as the yardstick, so the speed-up is a ratio measured
in the same process. `--cli` adds the marginal seconds per episode of the real
`python -m bench` command (the difference of two run lengths, so start-up cancels);
`--sweep` compares the basic and the joblib launcher on a small headline sweep.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from bench.optim import build_optimizer
from contract.rng import Streams
from bench.build import build
from bench.runner import train_episode

CASES = (("tpo", "reverse_h10"), ("grpo", "reverse_h10"), ("dg", "reverse_h10"),
         ("ppo", "reverse_h10"), ("tpo_token", "reversal_v16"), ("grpo", "reversal_v16"),
         ("dg", "reversal_v16"), ("tpo", "mnist"))
REPO = Path(__file__).resolve().parent.parent


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg.pop("hydra", None)
    return cfg


def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return {"cpu": cpu, "cores": str(os.cpu_count()), "gpu": gpu, "torch": torch.__version__}


# ---------------------------------------------------------------- FLOP counts

def transformer_flops_per_token(V: int, d: int = 64, layers: int = 2, ffn: int = 4, ctx: int = 10) -> float:
    """Forward FLOPs for one token: the dense matmuls (q/k/v/out, FFN, head) and the
    attention scores and mix over `ctx` keys; 2 FLOPs per multiply-add."""
    dense = layers * (4 * d * d + 2 * d * ffn * d) + d * V
    return 2 * dense + layers * 4 * ctx * d


def seq_episode_flops(spec) -> float:
    """Generation plus algo.epochs forward+backward (about 3x a forward) per episode."""
    t, a = spec.task, spec.algo
    if not hasattr(t, "sequence_length"):
        return float("nan")
    B, H, V, K = t.batch_size, t.sequence_length, t.vocab_size, a.k
    per = lambda ctx: transformer_flops_per_token(V, ctx=ctx)
    token_level = getattr(a, "level", "sequence") == "token"
    if token_level:  # B trajectories; the K candidates cost only a gather
        gen = B * H * per(H / 2) + B * (H - 1) * per(1.5 * H)
        train_tokens = B * (2 * H - 1)
    else:
        gen = B * H * per(H / 2) + B * K * (H - 1) * per(1.5 * H)
        train_tokens = B * H + B * K * (H - 1)  # each prompt once per group (shared prefix)
    return gen + a.epochs * 3 * train_tokens * per(H)


def matmul_rate(tokens: int, threads: int, d: int = 64, hidden: int = 256, reps: int = 30) -> float:
    """Measured fp32 GFLOP/s of the model's two FFN matmul shapes at this token count."""
    torch.set_num_threads(threads)
    x, w1 = torch.randn(tokens, d), torch.randn(d, hidden)
    h, w2 = torch.randn(tokens, hidden), torch.randn(hidden, d)
    for _ in range(3):
        x @ w1, h @ w2
    t0 = time.perf_counter()
    for _ in range(reps):
        x @ w1
        h @ w2
    return reps * 2 * 2 * tokens * d * hidden / (time.perf_counter() - t0) / 1e9


# ---------------------------------------------------------------- timing

def time_case(algo: str, task: str, episodes: int, warmup: int, threads: int) -> dict:
    spec = build(compose(f"algo={algo}", f"task={task}"))
    torch.set_num_threads(threads)
    streams = Streams.from_seed(0)
    policy = spec.task.make_policy(streams.init)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    for _ in range(warmup):
        train_episode(spec.task, spec.algo, spec.request, policy, opt, streams)
    clock: dict[str, float] = {}
    t0 = time.perf_counter()
    for _ in range(episodes):
        train_episode(spec.task, spec.algo, spec.request, policy, opt, streams, clock)
    dt = (time.perf_counter() - t0) / episodes
    flops = seq_episode_flops(spec)
    return {"algo": algo, "task": task, "threads": threads, "episodes_per_s": 1 / dt,
            "ms_episode": 1e3 * dt,
            "ms_generation": 1e3 * clock["generation"] / episodes,
            "ms_old_logprobs": 0.0,  # reused from generation: no second forward
            "ms_training": 1e3 * clock["training"] / episodes,
            "ms_bookkeeping": 1e3 * clock["bookkeeping"] / episodes,
            "gflops_per_s": flops / dt / 1e9}


@torch.no_grad()
def _eager_generate(policy, prompts, k, gen):
    """The obvious implementation: re-run the whole sequence for every new token."""
    seq = prompts.repeat_interleave(k, 0)
    for _ in range(prompts.shape[1]):
        logp = torch.log_softmax(policy(seq)[:, -1], -1)
        seq = torch.cat([seq, torch.multinomial(logp.exp(), 1, generator=gen)], 1)
    return seq


def time_eager_tpo(episodes: int, warmup: int, threads: int) -> dict:
    """The yardstick TPO episode on reverse_h10, same model, loss and optimizer."""
    from algorithms.tpo import tpo_target
    from tasks.seq import target_tokens, token_rewards

    spec = build(compose("algo=tpo", "task=reverse_h10"))
    t, a = spec.task, spec.algo
    torch.set_num_threads(threads)
    streams = Streams.from_seed(0)
    policy = t.make_policy(streams.init)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    B, H, K = t.batch_size, t.sequence_length, a.k

    def episode(clock):
        c0 = time.perf_counter()
        prompts = torch.randint(0, t.vocab_size, (B, H), generator=streams.data)
        seq = _eager_generate(policy, prompts, K, streams.action)
        c1 = time.perf_counter()
        answers = seq[:, H:]

        def seq_logp():
            logp = torch.log_softmax(policy(seq[:, :-1])[:, H - 1:], -1)
            return logp.gather(-1, answers.unsqueeze(-1)).sum((1, 2)).view(B, K)

        with torch.no_grad():
            old = seq_logp()
        c2 = time.perf_counter()
        correct = answers.view(B, K, H) == target_tokens(prompts, t.target, t.vocab_size).unsqueeze(1)
        q = tpo_target(old, token_rewards(correct, t.reward).mean(-1))
        for _ in range(a.epochs):
            loss = -(q * torch.log_softmax(seq_logp(), -1)).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        c3 = time.perf_counter()
        for phase, d in (("generation", c1 - c0), ("old_logprobs", c2 - c1), ("training", c3 - c2)):
            clock[phase] = clock.get(phase, 0.0) + d

    for _ in range(warmup):
        episode({})
    clock: dict[str, float] = {}
    t0 = time.perf_counter()
    for _ in range(episodes):
        episode(clock)
    dt = (time.perf_counter() - t0) / episodes
    eager_flops = seq_episode_flops(spec)  # counted as the optimised path's useful work
    return {"algo": "tpo (eager yardstick)", "task": "reverse_h10", "threads": threads,
            "episodes_per_s": 1 / dt, "ms_episode": 1e3 * dt,
            "ms_generation": 1e3 * clock["generation"] / episodes,
            "ms_old_logprobs": 1e3 * clock["old_logprobs"] / episodes,
            "ms_training": 1e3 * clock["training"] / episodes, "ms_bookkeeping": 0.0,
            "gflops_per_s": eager_flops / dt / 1e9}


def cli_marginal(threads: int, short: int = 5, long: int = 25) -> float:
    """Marginal s/episode of `python -m bench algo=tpo task=reverse_h10`: two run
    lengths, so interpreter start-up, imports and Hydra cancel out."""
    times = []
    for n in (short, long):
        with tempfile.TemporaryDirectory() as root:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bench", "algo=tpo", "task=reverse_h10",
                            f"task.episodes={n}", f"threads={threads}", f"output_root={root}",
                            "log_every=1000"], check=True, capture_output=True, cwd=REPO)
            times.append(time.perf_counter() - t0)
    return (times[1] - times[0]) / (long - short)


def sweep_throughput(episodes: int = 20) -> list[dict]:
    """The headline sweep's shape (tpo, grpo, dg x 2 seeds on reverse_h10) under the basic
    launcher (one job at a time, all cores) and joblib (one job per core, 1 thread)."""
    cores = os.cpu_count() or 1
    setups = {f"basic, 1 job x {cores} threads": [f"threads={cores}"],
              f"joblib, {cores} jobs x 1 thread": ["threads=1", "hydra/launcher=joblib",
                                                   f"hydra.launcher.n_jobs={cores}"]}
    out = []
    for name, extra in setups.items():
        with tempfile.TemporaryDirectory() as root:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bench", "-m", "algo=tpo,grpo,dg",
                            "task=reverse_h10", "seed=0,1", f"task.episodes={episodes}",
                            f"output_root={root}", "log_every=1000", *extra],
                           check=True, capture_output=True, cwd=REPO)
            wall = time.perf_counter() - t0
        out.append({"setup": name, "wall_s": wall, "episodes_per_s": 6 * episodes / wall})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    p.add_argument("--cases", nargs="*", default=None, help="algo:task pairs (default: all)")
    p.add_argument("--cli", action="store_true", help="also time the real CLI (marginal s/episode)")
    p.add_argument("--sweep", action="store_true", help="also compare sweep launchers")
    p.add_argument("--out", default="outputs/speed/speed.csv")
    args = p.parse_args(argv)

    cases = [tuple(c.split(":")) for c in args.cases] if args.cases else CASES
    info = machine()
    rows = []
    for threads in args.threads:
        rows.append(time_eager_tpo(args.episodes, args.warmup, threads))
        for algo, task in cases:
            rows.append(time_case(algo, task, args.episodes, args.warmup, threads))
    df = pd.DataFrame(rows)
    tokens = 100 * 10 + 800 * 9
    rate = {t: matmul_rate(tokens, t) for t in args.threads}
    df["matmul_gflops_per_s"] = df["threads"].map(rate)
    df["frac_of_matmul"] = df["gflops_per_s"] / df["matmul_gflops_per_s"]
    for key, value in info.items():
        df[key] = value
    eager = df[df["algo"].str.contains("eager")].set_index("threads")["ms_episode"]
    tpo = df[(df["algo"] == "tpo") & (df["task"] == "reverse_h10")].set_index("threads")["ms_episode"]
    print(f"machine: {info['cpu']}, {info['cores']} cores, GPU {info['gpu']}, torch {info['torch']}")
    cols = ["algo", "task", "threads", "episodes_per_s", "ms_generation", "ms_old_logprobs",
            "ms_training", "ms_bookkeeping", "gflops_per_s", "frac_of_matmul"]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    for t in args.threads:
        if t in eager and t in tpo:
            print(f"TPO reverse_h10, {t} thread(s): {tpo[t] / 1e3:.3f} s/episode, "
                  f"{eager[t] / tpo[t]:.1f}x the eager yardstick")
    if args.cli:
        for t in args.threads:
            print(f"CLI marginal, threads={t}: {cli_marginal(t):.3f} s/episode "
                  "(python -m bench algo=tpo task=reverse_h10)")
    if args.sweep:
        for r in sweep_throughput():
            print(f"sweep {r['setup']}: {r['episodes_per_s']:.2f} episodes/s ({r['wall_s']:.0f} s)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
