"""Speed benchmark: `python -m dev.speed [--episodes N] [--threads T ...]`.

Times each algorithm on its representative task after warm-up: episodes/s, ms per phase
and achieved GFLOP/s against the measured fp32 matmul rate, beside a plain eager TPO
episode as the yardstick. `--cli` adds the marginal seconds of `python -m bench`;
`--sweep` compares the basic and the joblib launcher. `--base CHECKOUT` times a single
seed's episode under this code against another checkout's, in paired rounds.

`--seeds 1 8 20 30 [--device cuda]`: seed-episodes per second of a `batch_seeds=true`
job for reverse_h10 TPO and GRPO and the mechanism study's shared config, peak memory,
and the study's cost on this device (see `estimate`). `--ops --seeds 1 8 32` counts the
ops each batched episode dispatches; `--vs-loop --seeds 8` times the batched path against
the per-seed loop, paired. `--profile` splits one thread's episode by phase and kind of
op (`--config` for other configs); `--candidates` times what a lower floor would take.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dev import record
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.contract.rng import Streams
from tpo_bench.bench.build import build
from tpo_bench.bench.config import compose, composed
from tpo_bench.bench.jobs import explicit_keys, job_specs
from tpo_bench.bench.engine import train_episode

CASES = (("tpo", "reverse_h10"), ("grpo", "reverse_h10"), ("dg", "reverse_h10"),
         ("ppo", "reverse_h10"), ("tpo_token", "reversal_v16"), ("grpo", "reversal_v16"),
         ("dg", "reversal_v16"), ("tpo", "mnist"))
REPO = Path(__file__).resolve().parent.parent


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
    (policy,), (opt,), (streams,) = seed_policies(spec, 1)
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
    from tpo_bench.algorithms.tpo import tpo_target
    from tpo_bench.tasks.seq import target_tokens, token_rewards

    spec = build(compose("algo=tpo", "task=reverse_h10"))
    t, a = spec.task, spec.algo
    torch.set_num_threads(threads)
    (policy,), (opt,), (streams,) = seed_policies(spec, 1)
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


# ---------------------------------------------------------------- seed-batched mode

STUDY = ("k_sweep", "epoch_sweep", "zero_variance_masking")  # the mechanism study (science §The paper's numbers)
# The study's shared config (reverse_h8, B 256, K 32, 4 epochs) is this preset's tpo and grpo.
CENTRE = "zero_variance_masking"
# The goals on one H200: the headline's 20 seeds x 2000 episodes of reverse_h10
# TPO in under 10 minutes, the whole mechanism study in under 2 GPU-hours.
HEADLINE_SEEDS, HEADLINE_EPISODES, HEADLINE_GOAL_MIN = 20, 2000, 10.0
STUDY_GOAL_H = 2.0


def seed_policies(spec, seeds: int) -> tuple[list, list, list[Streams]]:
    """Policies, optimizers and streams of seeds 0..seeds-1 on spec.run.device, each made as
    a run makes its own (bench.runner.open_seat)."""
    streams = [Streams.from_seed(s, spec.run.device) for s in range(seeds)]
    policies = [spec.task.make_policy(st.init).to(spec.run.device) for st in streams]
    opts = [build_optimizer(spec.optim_name, list(p.parameters()), **spec.optim_hparams) for p in policies]
    return policies, opts, streams


def _sync(device: str) -> None:
    """CUDA runs asynchronously: a timed region ends when the device has finished."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_seeds(overrides: tuple[str, ...], seeds: int, episodes: int, warmup: int) -> dict:
    """Seed-episodes/s of bench.engine.train_episodes over `seeds` policies of the config
    `overrides` compose to (a later override of a key wins), and the peak device memory."""
    from tpo_bench.bench import engine

    spec = build(compose(*overrides), explicit_keys(overrides))
    t, device = spec.task, spec.run.device
    row = {"algo": spec.algo_name, "task": t.name, "seeds": seeds, "batch_size": t.batch_size,
           "k": spec.request.k, "epochs": spec.algo.epochs, "episodes": episodes,
           "seconds": math.nan, "seed_episodes_per_s": math.nan, "s_per_episode": math.nan,
           "peak_mem_gib": math.nan, "device": device, "note": ""}
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        policies, opts, streams = seed_policies(spec, seeds)
        for _ in range(warmup):
            engine.train_episodes(t, spec.algo, spec.request, policies, opts, streams)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(episodes):
            engine.train_episodes(t, spec.algo, spec.request, policies, opts, streams)
        _sync(device)
        seconds = time.perf_counter() - t0
    except torch.OutOfMemoryError:  # a row that says so; the other shapes still get measured
        row["note"] = "out of memory"
        return row
    row.update(seconds=seconds, seed_episodes_per_s=seeds * episodes / seconds,
               s_per_episode=seconds / episodes)
    if cuda:
        row["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return row


class OpCount(TorchDispatchMode):
    """Counts the aten ops an episode dispatches below autograd: every op that runs a
    kernel (a launch on a GPU), views (metadata only, _unsafe_view too) left out, and the
    values read one by one into Python (`_local_scalar_dense`: .item(), float(), int();
    each a host sync on a GPU; the rows' one batched read, a .tolist(), is not a
    dispatched op). A foreach op counts once, as its fused kernel launches once per chunk
    of tensors on a GPU (on the CPU it loops inside)."""

    def __init__(self):
        super().__init__()
        self.ops = self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket is not torch.ops.aten._unsafe_view:
            self.ops += 1
            self.reads += func.overloadpacket is torch.ops.aten._local_scalar_dense
        return func(*args, **(kwargs or {}))


def count_ops(overrides: tuple[str, ...], seeds: int, episodes: int = 2, warmup: int = 1) -> dict:
    """Ops per episode of bench.engine.train_episodes over `seeds` policies (S = 1 is the
    single run's own train_episode), the mean of `episodes` after `warmup`."""
    from tpo_bench.bench import engine

    spec = build(compose(*overrides), explicit_keys(overrides))
    t = spec.task
    policies, opts, streams = seed_policies(spec, seeds)
    for _ in range(warmup):
        engine.train_episodes(t, spec.algo, spec.request, policies, opts, streams)
    with OpCount() as count:
        for _ in range(episodes):
            engine.train_episodes(t, spec.algo, spec.request, policies, opts, streams)
    return {"algo": spec.algo_name, "task": t.name, "seeds": seeds, "batch_size": t.batch_size,
            "k": spec.request.k, "epochs": spec.algo.epochs,
            "ops_per_episode": count.ops / episodes, "ops_per_seed_episode": count.ops / episodes / seeds,
            "item_reads_per_episode": count.reads / episodes}


def ops_cases(batch_size: int | None) -> list[tuple[str, tuple[str, ...]]]:
    """reverse_h10 TPO and GRPO and the mechanism study's shared config (its tpo and grpo)."""
    centre: dict[str, tuple[str, ...]] = {}
    for j in study_jobs(CENTRE):
        centre.setdefault(j.algo, j.overrides)
    extra = (f"task.batch_size={batch_size}",) if batch_size else ()
    cases = [("reverse_h10", ("task=reverse_h10", f"algo={a}", *extra)) for a in ("tpo", "grpo")]
    return cases + [(CENTRE, (*centre[a], *extra)) for a in ("tpo", "grpo")]


def ops_table(df: pd.DataFrame) -> str:
    """The ops table as Markdown: per case, ops per batched episode and per seed-episode
    at each S, and S's batched episode against the single run's (S = 1)."""
    lines = ["| case | algo | B | S | ops / episode | ops / seed-episode | x single run | item reads / episode |",
             "|---|---|---|---|---|---|---|---|"]
    for (case, algo), g in df.groupby(["case", "algo"], sort=False):
        single = g.loc[g["seeds"] == 1, "ops_per_episode"]
        for _, r in g.iterrows():
            ratio = f"{r['ops_per_episode'] / single.iloc[0]:.2f}" if len(single) else ""
            lines.append(f"| {case} | {algo} | {r['batch_size']} | {r['seeds']} | "
                         f"{r['ops_per_episode']:,.0f} | {r['ops_per_seed_episode']:,.0f} | {ratio} | "
                         f"{r['item_reads_per_episode']:g} |")
    return "\n".join(lines)


def ops_mode(args) -> int:
    """`--ops`: leaf device ops per episode at each --seeds S, one thread, a CSV."""
    torch.set_num_threads(1)
    rows = [{"case": case, **count_ops(overrides, S, args.episodes, args.warmup)}
            for case, overrides in ops_cases(args.batch_size) for S in args.seeds]
    df = pd.DataFrame(rows)
    df["torch"] = torch.__version__
    print(ops_table(df))
    return write_table(df, args.out or "outputs/speed/ops.csv")


def vs_loop(overrides: tuple[str, ...], seeds: int, rounds: int, warmup: int = 1) -> list[dict]:
    """Paired, alternating timings of one episode for `seeds` seeds: the per-seed loop
    (train_episode seed after seed, as batch_seeds=false) and the batched path
    (bench.engine.train_episodes), each round timing both, in alternating order."""
    from tpo_bench.bench import engine

    spec = build(compose(*overrides), explicit_keys(overrides))
    t = spec.task
    loop, batch = seed_policies(spec, seeds), seed_policies(spec, seeds)

    def run_loop():
        for p, o, st in zip(*loop):
            train_episode(t, spec.algo, spec.request, p, o, st)

    def run_batched():
        engine.train_episodes(t, spec.algo, spec.request, *batch)

    for _ in range(warmup):
        run_loop(), run_batched()
    rows = []
    for r in range(rounds):
        times = {}
        for name, fn in (("loop", run_loop), ("batched", run_batched))[::1 if r % 2 == 0 else -1]:
            t0 = time.perf_counter()
            fn()
            times[name] = time.perf_counter() - t0
        rows.append({"algo": spec.algo_name, "task": t.name, "seeds": seeds, "batch_size": t.batch_size,
                     "round": r, "loop_s": times["loop"], "batched_s": times["batched"],
                     "speedup": times["loop"] / times["batched"]})
    return rows


def vs_loop_table(df: pd.DataFrame) -> str:
    """The paired timings as Markdown: per (algo, S), the median seconds of each path and
    the loop / batched ratio's median and range over the rounds."""
    lines = ["| algo | S | B | rounds | loop s / episode | batched s / episode | speed-up: median (min-max) |",
             "|---|---|---|---|---|---|---|"]
    for (algo, S, B), g in df.groupby(["algo", "seeds", "batch_size"], sort=False):
        lines.append(f"| {algo} | {S} | {B} | {len(g)} | {g['loop_s'].median():.2f} | "
                     f"{g['batched_s'].median():.2f} | {g['speedup'].median():.2f}x "
                     f"({g['speedup'].min():.2f}-{g['speedup'].max():.2f}) |")
    return "\n".join(lines)


def vs_loop_mode(args) -> int:
    """`--vs-loop`: the batched path against the per-seed loop, paired and alternating."""
    threads = (args.threads or [1])[0]
    torch.set_num_threads(threads)
    extra = (f"task.batch_size={args.batch_size}",) if args.batch_size else ()
    rows = [row for algo in ("tpo", "grpo") for S in args.seeds
            for row in vs_loop(("task=reverse_h10", f"algo={algo}", *extra), S, args.episodes)]
    df = pd.DataFrame(rows)
    df["threads"], df["torch"] = threads, torch.__version__
    print(f"batched vs the per-seed loop ({threads} thread(s), paired alternating rounds; "
          "speed-up = loop seconds / batched seconds):")
    print(vs_loop_table(df))
    return write_table(df, args.out or "outputs/speed/vs_loop.csv")


def sweep_jobs(*overrides: str) -> list[list[str]]:
    """Each job's overrides in `python -m bench -m OVERRIDES`, expanded as the sweeper
    expands them: the preset's hydra.sweeper.params, then the command line."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    cfg = composed(*overrides, hydra=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True) or {}
    parsed = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in params.items()] + list(overrides))
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


@dataclass(frozen=True)
class Job:
    """One job of a sweep, as the estimate prices it."""
    experiment: str
    overrides: tuple[str, ...]  # composes to its config (its first seed)
    algo: str
    k: int
    epochs: int
    episodes: int
    preset_seeds: int  # the preset's `seeds`
    run_dirs: tuple[str, ...]  # one per seed the job trains


def study_jobs(experiment: str, *overrides: str) -> list[Job]:
    """The jobs of `python -m bench -m +experiment=NAME OVERRIDES`, each config composed
    once (its seeds differ only in the directory), as the sweeper validates them."""
    from tpo_bench.contract.schema import seed_dir

    jobs, configs = [], {}
    for job in sweep_jobs(f"+experiment={experiment}", *overrides):
        rest = tuple(o for o in job if not o.startswith("seed="))
        seed = int(next(o for o in job if o.startswith("seed=")).split("=", 1)[1])
        if rest not in configs:
            cfg = compose(*rest, f"seed={seed}")
            configs[rest] = cfg["seeds"], job_specs(cfg, explicit_keys(rest))
        preset_seeds, specs = configs[rest]
        s = specs[0]
        home = s.run_dir.parent
        jobs.append(Job(experiment, (*rest, f"seed={seed}"), s.algo_name, s.request.k, s.algo.epochs,
                        s.task.episodes, preset_seeds,
                        tuple(str(home / seed_dir(seed + i)) for i in range(len(specs)))))
    return jobs


def bilinear(k: int, epochs: int, corners: dict[tuple[int, int], float]) -> float:
    """Seconds per episode at (k, epochs) from those measured at the corners of the
    (K, epochs) box around it. Exact when an episode costs a + b K + c epochs + d K epochs
    (generation ~ K, an optimizer step per epoch, training ~ K x epochs); a box that is a
    line or a point interpolates along it or is that point."""
    ks, es = sorted({c[0] for c in corners}), sorted({c[1] for c in corners})
    (k0, k1), (e0, e1) = (ks[0], ks[-1]), (es[0], es[-1])
    wk = (k - k0) / (k1 - k0) if k1 > k0 else 0.0
    we = (epochs - e0) / (e1 - e0) if e1 > e0 else 0.0
    return ((1 - wk) * (1 - we) * corners[k0, e0] + wk * (1 - we) * corners[k1, e0]
            + (1 - wk) * we * corners[k0, e1] + wk * we * corners[k1, e1])


def estimate(seeds: int, device: str, extra: tuple[str, ...], episodes: int,
             warmup: int) -> tuple[pd.DataFrame, list[dict]]:
    """The mechanism study's cost here: its jobs as `+pack=gpu seeds_per_job=SEEDS` launches
    them, each costing its episodes x the seconds per episode of `seeds` batched policies
    at its (algo, K, epochs), interpolated (`bilinear`) from the corners of each
    algorithm's (K, epochs) box measured here. A job whose runs an earlier preset already
    trains is skipped, as the sweep skips completed runs. Returns one row per job and the
    corner measurements."""
    pack = ("+pack=gpu", f"seeds_per_job={seeds}", f"device={device}")
    jobs = [j for name in STUDY for j in study_jobs(name, *pack)]
    boxes: dict[str, set[tuple[int, int]]] = {}
    for j in jobs:
        boxes.setdefault(j.algo, set()).add((j.k, j.epochs))
    measured, corners = [], {}
    for algo, shapes in boxes.items():
        example = next(j for j in jobs if j.algo == algo)
        ks, es = [s[0] for s in shapes], [s[1] for s in shapes]
        for k in sorted({min(ks), max(ks)}):
            for e in sorted({min(es), max(es)}):
                row = time_seeds((*example.overrides, f"algo.k={k}", f"algo.epochs={e}", *extra),
                                 seeds, episodes, warmup)
                corners.setdefault(algo, {})[k, e] = row["s_per_episode"]
                measured.append({"case": "estimate corner", **row})
    rows, seen = [], set()
    for j in jobs:
        new = [d for d in j.run_dirs if d not in seen]
        seen.update(j.run_dirs)
        s = bilinear(j.k, j.epochs, corners[j.algo]) if new else 0.0
        rows.append({"experiment": j.experiment, "algo": j.algo, "k": j.k, "epochs": j.epochs,
                     "preset_seeds": j.preset_seeds, "runs": len(j.run_dirs), "new_runs": len(new),
                     "episodes": j.episodes,
                     "s_per_episode": s, "hours": j.episodes * s / 3600})
    return pd.DataFrame(rows), measured


def seeds_mode(args) -> int:
    """`--seeds`: the seed-batched table, the study estimate and the goals, two CSVs."""
    threads = args.threads or [os.cpu_count() or 1]
    if len(threads) != 1:
        raise SystemExit("--seeds: give one --threads value")
    torch.set_num_threads(threads[0])
    extra = (f"device={args.device}", *((f"task.batch_size={args.batch_size}",) if args.batch_size else ()))
    centre: dict[str, tuple[str, ...]] = {}
    for j in study_jobs(CENTRE):
        centre.setdefault(j.algo, j.overrides)
    cases = [("reverse_h10", ("task=reverse_h10", f"algo={a}")) for a in ("tpo", "grpo")]
    cases += [(CENTRE, centre[a]) for a in ("tpo", "grpo")]
    rows = [{"case": case, **time_seeds((*overrides, *extra), S, args.episodes, args.warmup)}
            for case, overrides in cases for S in args.seeds]
    per_job, corners = estimate(max(args.seeds), args.device, extra, args.episodes, args.warmup)
    info = machine()
    df = pd.DataFrame(rows + corners)
    for key, value in info.items():
        df[key] = value

    kind = "GPU" if torch.device(args.device).type == "cuda" else "CPU"
    shrunk = f", B shrunk to {args.batch_size}: not the paper's sizes" if args.batch_size else ""
    fmt = lambda v: f"{v:.3g}"
    # A goal is met or missed on a GPU at the paper's sizes only; elsewhere it is a yardstick.
    verdict = lambda met: (": met" if met else ": missed") if kind == "GPU" and not shrunk else ""
    print(f"machine: {info['cpu']}, {info['cores']} cores, GPU {info['gpu']}, torch {info['torch']}; "
          f"device {args.device} ({kind}{shrunk}), threads {threads[0]}, "
          f"{args.episodes} timed episodes after {args.warmup} of warm-up")
    cols = ["case", "algo", "seeds", "batch_size", "k", "epochs", "seed_episodes_per_s",
            "s_per_episode", "peak_mem_gib", "note"]
    print(df[cols].to_string(index=False, float_format=fmt))

    S = max(args.seeds)
    by_preset = per_job.groupby("experiment", sort=False).agg(
        jobs=("runs", "size"), runs=("runs", "sum"), new_runs=("new_runs", "sum"),
        hours=("hours", "sum"))
    by_preset["new_run_episodes"] = (per_job["new_runs"] * per_job["episodes"]).groupby(
        per_job["experiment"], sort=False).sum()
    total = by_preset.sum()
    print(f"\nmechanism study on this device ({kind}{shrunk}): +pack=gpu seeds_per_job={S}, "
          f"{kind}-hours from s/episode at {S} seeds, bilinear in (K, epochs) between "
          f"measured corners")
    print(by_preset.reset_index().to_string(index=False, float_format=fmt))
    if (per_job["preset_seeds"] % S).any():
        print(f"  (seeds_per_job={S} does not divide the presets' {per_job['preset_seeds'].max()} seeds: "
              f"each config's last job trains past them, as the sweep would)")
    print(f"total: {int(total['new_runs'])} runs ({int(total['runs'])} listed), "
          f"{int(total['new_run_episodes'])} seed-episodes, {total['hours']:.3g} {kind}-hours "
          f"(goal on one H200: < {STUDY_GOAL_H:g} GPU-hours{verdict(total['hours'] < STUDY_GOAL_H)})")
    check = df[(df["case"] == CENTRE) & (df["seeds"] == S)]
    for _, r in check.iterrows():
        model = bilinear(r["k"], r["epochs"],
                         {(c["k"], c["epochs"]): c["s_per_episode"] for c in corners if c["algo"] == r["algo"]})
        print(f"  check, {r['algo']} K {r['k']} epochs {r['epochs']}: interpolated {model:.3g} "
              f"s/episode, measured {r['s_per_episode']:.3g} ({model / r['s_per_episode'] - 1:+.0%})")
    head = df[(df["case"] == "reverse_h10") & (df["algo"] == "tpo")]
    minutes = {int(r["seeds"]): math.ceil(HEADLINE_SEEDS / r["seeds"]) * HEADLINE_EPISODES
               * r["s_per_episode"] / 60 for _, r in head.iterrows()}
    best = min(minutes, key=lambda s: minutes[s])
    print(f"reverse_h10 TPO, {HEADLINE_SEEDS} seeds x {HEADLINE_EPISODES} episodes: "
          f"{minutes[best]:.3g} min on this {kind} (at S = {best}; goal on one "
          f"H200: < {HEADLINE_GOAL_MIN:g} min{verdict(minutes[best] < HEADLINE_GOAL_MIN)})")

    out = Path(args.out or f"outputs/speed/seeds_{args.device.replace(':', '')}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    record.stamp(df).to_csv(out, index=False)
    record.stamp(per_job).to_csv(out.with_name(out.stem + "_estimate.csv"), index=False)
    print(f"wrote {out} and {out.with_name(out.stem + '_estimate.csv')}")
    return 0



# ---------------------------------------------------------------- where an episode's time goes

# Kinds of aten op, first match wins (torch.profiler's names, forward and backward alike).
OP_KINDS = (("matmul", ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")),
            ("gelu", ("aten::gelu", "aten::gelu_backward")),
            ("attention", ("aten::_scaled_dot_product",)),
            ("layer norm", ("aten::native_layer_norm", "aten::addcmul")),
            ("copies", ("aten::cat", "aten::copy_", "aten::repeat_interleave", "aten::index",
                        "aten::stack", "aten::clone", "aten::fill_", "aten::zero_")),
            ("elementwise", ("aten::add", "aten::mul", "aten::sub", "aten::div", "aten::sum",
                             "aten::where", "aten::_log_softmax", "aten::exp", "aten::mean",
                             "aten::norm", "aten::linalg_vector_norm", "aten::_foreach")))


def op_kind(name: str) -> str:
    return next((kind for kind, prefixes in OP_KINDS if name.startswith(prefixes)), "other")


def profile_config(overrides: tuple[str, ...], episodes: int, warmup: int) -> list[dict]:
    """Where one thread's episode of this config goes: CPU-s per episode (process time,
    profiler off), the phases' shares (the engine's clock: generation, training,
    bookkeeping) and each kind of op's share of the profiled self time (torch.profiler;
    `other` is what no kind names: autograd's own work, views, Python between ops)."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    spec = build(compose(*overrides), explicit_keys(overrides))
    (policy,), (opt,), (streams,) = seed_policies(spec, 1)
    run = lambda clock=None: train_episode(spec.task, spec.algo, spec.request, policy, opt, streams, clock)
    for _ in range(warmup):
        run()
    clock: dict[str, float] = {}
    c0 = time.process_time()
    for _ in range(episodes):
        run(clock)
    cpu = (time.process_time() - c0) / episodes
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(episodes):
            run()
    averages = prof.key_averages()
    events = [e for e in averages if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in averages)
    kinds: dict[str, float] = {}
    for e in events:
        kinds[op_kind(e.key)] = kinds.get(op_kind(e.key), 0.0) + e.self_cpu_time_total
    kinds["other"] = total - sum(v for k, v in kinds.items() if k != "other")
    base = {"config": " ".join(overrides), "cpu_s_per_episode": cpu, "episodes": episodes}
    rows = [{**base, "part": "phase", "name": k, "share": v / sum(clock.values())} for k, v in clock.items()]
    rows += [{**base, "part": "op", "name": k, "share": v / total}
             for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])]
    return rows


def profile_table(df: pd.DataFrame) -> str:
    """The profile as Markdown: per config, CPU-s per episode, then each phase's and kind
    of op's share and its CPU-ms per episode (share x CPU-s)."""
    lines = ["| config | CPU-s / episode | part | name | share | CPU-ms / episode |",
             "|---|---|---|---|---|---|"]
    for config, g in df.groupby("config", sort=False):
        for _, r in g.iterrows():
            lines.append(f"| {config} | {r['cpu_s_per_episode']:.3f} | {r['part']} | {r['name']} | "
                         f"{100 * r['share']:.1f}% | {1e3 * r['share'] * r['cpu_s_per_episode']:.0f} |")
    return "\n".join(lines)


def profile_mode(args) -> int:
    """`--profile`: reverse_h10 TPO (and each --config) at one thread, a CSV."""
    configs = [("algo=tpo", "task=reverse_h10")] + [tuple(c.split()) for c in args.config or []]
    df = pd.DataFrame([r for c in configs for r in profile_config(c, args.episodes, args.warmup)])
    df["torch"] = torch.__version__
    print(profile_table(df))
    return write_table(df, args.out or "outputs/speed/profile.csv")


# ---------------------------------------------------------------- what the floor would take

def sigmoid_gelu(x: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    """GELU's tanh form as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the same
    function (0.5 (1 + tanh u) = sigmoid(2u)), other rounding, exp in place of tanh."""
    return x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x))


def matmul_attention(q, k, v, attn_mask=None, is_causal=False):
    """Attention as two matmuls and a softmax (what SDPA computes; other rounding)."""
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


# name -> (torch.compile backend or "eager", gelu, attention), each tried against the eager step
CANDIDATES = {"eager, sigmoid-form gelu": ("eager", sigmoid_gelu, None),
              "inductor": ("inductor", None, None),
              "inductor, sigmoid-form gelu": ("inductor", sigmoid_gelu, None),
              "inductor, sigmoid-form gelu, matmul attention": ("inductor", sigmoid_gelu, matmul_attention)}


@contextlib.contextmanager
def candidate_forward(gelu=None, attention=None):
    """Within it, the transformer's forward (tasks/stacked.py, every seed count's) computes
    GELU and attention with the functions given (None: its own)."""
    import types

    from tpo_bench.tasks import stacked

    F = stacked.F
    stacked.F = types.SimpleNamespace(gelu=gelu or F.gelu,
                                      scaled_dot_product_attention=attention or F.scaled_dot_product_attention)
    try:
        yield
    finally:
        stacked.F = F


def candidates(rounds: int, steps: int = 4) -> list[dict]:
    """Each CANDIDATES entry against the eager training step of reverse_h10 TPO (log-probs,
    loss and backward of one epoch, S = 1, one thread, the same batch), in paired rounds of
    `steps` steps each, alternating which goes first, after compiling and a warm-up."""
    torch.set_num_threads(1)
    spec = build(compose("algo=tpo", "task=reverse_h10"))
    t, a = spec.task, spec.algo
    (policy,), _, (streams,) = seed_policies(spec, 1)
    batch = t.rollout(policy, spec.request, streams).batch

    def step_of(pol):
        return lambda b: a.loss(b, t.logprobs(pol, b)).loss

    def timed(f, pol) -> float:
        c0 = time.process_time()
        for _ in range(steps):
            pol.zero_grad(set_to_none=True)
            f(batch).backward()
        return (time.process_time() - c0) / steps
    rows, eager = [], step_of(policy)
    for name, (backend, gelu, attention) in CANDIDATES.items():
        step = step_of(policy) if backend == "eager" else \
            torch.compile(step_of(policy), backend=backend, dynamic=False)

        def f(b, step=step, gelu=gelu, attention=attention):
            with candidate_forward(gelu, attention):  # dynamo guards on the functions it traced
                return step(b)
        c0 = time.process_time()
        diff = (f(batch) - eager(batch)).abs().item()
        compile_s = time.process_time() - c0
        timed(f, policy), timed(eager, policy)
        pairs = [(timed(eager, policy), timed(f, policy)) if r % 2 == 0 else
                 tuple(reversed((timed(f, policy), timed(eager, policy)))) for r in range(rounds)]
        for r, (e, c) in enumerate(pairs):
            rows.append({"candidate": name, "round": r, "eager_s": e, "candidate_s": c, "speedup": e / c,
                         "loss_abs_diff": diff, "first_call_cpu_s": compile_s})
    return rows


def group_table(df: pd.DataFrame, by: str, header: list[str], cells) -> str:
    """Markdown: the header, then one row per group of `by` (cells(key, group) -> its cells)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells(key, g)) + " |" for key, g in df.groupby(by, sort=False)]
    return "\n".join(lines)


def spread(s: pd.Series, fmt: str = "{:.2f}x") -> str:
    """A paired ratio's median (min-max) over the rounds."""
    return f"{fmt.format(s.median())} ({fmt.format(s.min()).rstrip('x')}-{fmt.format(s.max()).rstrip('x')})"


def candidates_table(df: pd.DataFrame) -> str:
    """Per candidate: rounds, median seconds per training step each way, the speed-up's
    median (min-max) and the first call's CPU seconds (compiling)."""
    return group_table(df, "candidate", ["candidate", "rounds", "eager s / step", "candidate s / step",
                                         "speed-up: median (min-max)", "first call CPU-s"],
                       lambda name, g: [name, str(len(g)), f"{g['eager_s'].median():.3f}",
                                        f"{g['candidate_s'].median():.3f}", spread(g["speedup"]),
                                        f"{g['first_call_cpu_s'].iloc[0]:.1f}"])


def candidates_mode(args) -> int:
    df = pd.DataFrame(candidates(args.episodes))
    df["torch"] = torch.__version__
    print(candidates_table(df))
    return write_table(df, args.out or "outputs/speed/candidates.csv")


# One process's timing for --base, run in either checkout (its code: the working directory):
# a single seed's episodes on one thread after warm-up, at least `episodes` and until
# `seconds` of CPU have passed; CPU and wall seconds per episode.
_ONE_SEED = """
import json, sys, time, torch
from tpo_bench.bench.build import build
from tpo_bench.bench.config import compose
from tpo_bench.bench.engine import train_episode
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.contract.rng import Streams
torch.set_num_threads(1)
warmup, episodes, seconds, overrides = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
spec = build(compose(*overrides, "threads=1"))
st = Streams.from_seed(0)
policy = spec.task.make_policy(st.init)
opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
for _ in range(warmup):
    train_episode(spec.task, spec.algo, spec.request, policy, opt, st)
c0, w0, n = time.process_time(), time.perf_counter(), 0
while n < episodes or time.process_time() - c0 < seconds:
    train_episode(spec.task, spec.algo, spec.request, policy, opt, st)
    n += 1
print(json.dumps({"cpu_s": (time.process_time() - c0) / n, "wall_s": (time.perf_counter() - w0) / n, "n": n}))
"""
BASE_CASES = ("task=reverse_h10 algo=tpo", "task=reverse_h10 algo=grpo", "task=tabular_single algo=tpo",
              "task=tabular_multi algo=grpo")


def vs_base(base: Path, configs: list[str], rounds: int, episodes: int, warmup: int,
            seconds: float = 3.0) -> list[dict]:
    """A single seed's CPU seconds per episode under this checkout's code and `base`'s,
    paired: each round times both (at least `episodes` episodes and `seconds` of CPU), in
    fresh processes, in alternating order (a load that drifts then weighs on both alike)."""
    rows = []
    for config in configs:
        for r in range(rounds):
            got = {}
            for side, cwd in (("this", REPO), ("base", base))[::1 if r % 2 == 0 else -1]:
                out = subprocess.run([sys.executable, "-c", _ONE_SEED, str(warmup), str(episodes), str(seconds),
                                      *config.split()],
                                     cwd=cwd, capture_output=True, text=True, check=True)
                got[side] = json.loads(out.stdout.splitlines()[-1])
            rows.append({"config": config, "round": r, "episodes": min(t["n"] for t in got.values()),
                         **{f"{side}_{k}": v for side, t in got.items() for k, v in t.items()},
                         "cpu_ratio": got["this"]["cpu_s"] / got["base"]["cpu_s"]})
    return rows


def vs_base_table(df: pd.DataFrame) -> str:
    """Per config: the median CPU ms per episode of each checkout and the this / base
    ratio's median and range over the rounds."""
    return group_table(df, "config", ["config", "rounds x episodes", "base CPU ms / ep", "this CPU ms / ep",
                                      "this / base: median (min-max)"],
                       lambda config, g: [config, f"{len(g)} x {g['episodes'].min()}+",
                                          _ms(g['base_cpu_s'].median()), _ms(g['this_cpu_s'].median()),
                                          spread(g["cpu_ratio"], "{:.3f}")])


def _ms(seconds: float) -> str:
    """Milliseconds to four significant figures (a tabular episode is under 1 ms)."""
    return f"{1e3 * seconds:#.4g}"


def base_mode(args) -> int:
    """`--base`: this checkout's single-seed episode against another checkout's, paired."""
    df = pd.DataFrame(vs_base(Path(args.base), args.cases or list(BASE_CASES), args.episodes,
                              args.base_episodes, args.warmup, args.base_seconds))
    df["torch"], df["cpu"] = torch.__version__, machine()["cpu"]
    df = record.stamp(df, base=Path(args.base))
    print(f"single seed, one thread, this checkout against {args.base} (paired alternating rounds; "
          "ratio = this CPU seconds / base CPU seconds):")
    print(vs_base_table(df))
    return write_table(df, args.out or "outputs/speed/vs_base.csv")


def write_table(df: pd.DataFrame, out: str | Path) -> int:
    """Write a benchmark's rows as CSV (folders made) with the code they measured (a
    `code` column unless it has one), say where; the command's exit code."""
    out = Path(out)
    df = df if "code" in df.columns else record.stamp(df)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(f"wrote {out}")
    return 0


def table_of(df: pd.DataFrame) -> str:
    """The Markdown table of a CSV that --ops, --vs-loop, --profile, --candidates or --base
    wrote, and the line that says which code it measured."""
    kinds = {"ops_per_episode": ops_table, "share": profile_table, "candidate": candidates_table,
             "cpu_ratio": vs_base_table, "loop_s": vs_loop_table}  # a column only its kind has
    found = [column for column in kinds if column in df.columns]
    if len(found) != 1:
        raise ValueError(f"not a table --ops, --vs-loop, --profile, --candidates or --base wrote: "
                         f"{'columns ' + ', '.join(found) + ' of several kinds' if found else 'none'} "
                         f"of the columns {', '.join(kinds)}")
    return f"{kinds[found[0]](df)}\n\n{record.code_line(df)}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="default: 1 and all cores (with --seeds: all cores)")
    p.add_argument("--cases", nargs="*", default=None, help="algo:task pairs (default: all)")
    p.add_argument("--cli", action="store_true", help="also time the real CLI (marginal s/episode)")
    p.add_argument("--sweep", action="store_true", help="also compare sweep launchers")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="the seed-batched mode: S policies trained as one (e.g. 1 8 20 30)")
    p.add_argument("--device", default="cpu", help="with --seeds: cpu (a dry run) or cuda")
    p.add_argument("--batch-size", type=int, default=None,
                   help="with --seeds: every config's B, to dry-run in seconds (default: its own)")
    p.add_argument("--out", default=None,
                   help="CSV (default outputs/speed/speed.csv; with --seeds seeds_<device>.csv "
                        "and, beside it, the estimate's per-job table)")
    p.add_argument("--ops", action="store_true",
                   help="with --seeds: count the ops per episode instead of timing (one thread)")
    p.add_argument("--vs-loop", action="store_true",
                   help="with --seeds: the batched path against the per-seed loop, paired "
                        "(--episodes rounds)")
    p.add_argument("--table", metavar="CSV", default=None,
                   help="print the Markdown table of a CSV that --ops, --vs-loop or --profile wrote")
    p.add_argument("--profile", action="store_true",
                   help="one thread's episode by phase and kind of op (reverse_h10 TPO, each --config)")
    p.add_argument("--candidates", action="store_true",
                   help="the training step's candidate speed-ups against eager, paired (--episodes rounds)")
    p.add_argument("--base", default=None, metavar="CHECKOUT",
                   help="a single seed's CPU s / episode, this checkout against CHECKOUT, paired "
                        "(--episodes rounds, each side at least --base-episodes episodes and "
                        "--base-seconds of CPU; --cases: override strings)")
    p.add_argument("--base-episodes", type=int, default=5)
    p.add_argument("--base-seconds", type=float, default=3.0)
    p.add_argument("--config", action="append", default=None,
                   help="with --profile: another config, its overrides in one string (repeatable)")
    args = p.parse_args(argv)
    if args.table:
        try:
            print(table_of(pd.read_csv(args.table)))
        except ValueError as e:
            p.error(f"--table {args.table}: {e}")
        return 0
    if args.config and not args.profile:
        p.error("--config goes with --profile")
    if args.profile:
        return profile_mode(args)
    if args.base:
        return base_mode(args)
    if args.candidates:
        return candidates_mode(args)
    if args.vs_loop:
        if not args.seeds:
            p.error("--vs-loop goes with --seeds (e.g. --vs-loop --seeds 8 --episodes 6)")
        return vs_loop_mode(args)
    if args.ops:
        if not args.seeds:
            p.error("--ops goes with --seeds (e.g. --ops --seeds 1 8 32 --batch-size 8)")
        return ops_mode(args)
    if args.seeds:
        return seeds_mode(args)
    if args.device != "cpu" or args.batch_size:
        p.error("--device and --batch-size go with --seeds")
    args.threads = args.threads or [1, os.cpu_count() or 1]
    args.out = args.out or "outputs/speed/speed.csv"

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
    return write_table(df, args.out)


if __name__ == "__main__":
    sys.exit(main())
