"""Seed batching, measured: S seeds' work as a Python loop over S modules, as
torch.func.vmap(functional_call) over stacked parameters, and as tasks.stacked (a seed
axis, one bmm per layer), side by side in one process, interleaved round-robin so that a
load change hits them alike.

    python -m dev.seed_batch_speed [--seeds 1 4 8] [--repeats 1] [--threads 1]
        [--parts train rollout episode] [--task task=reverse_h10 ...]

Prints seed-episodes per CPU-second (process CPU time: a busy machine steals wall time,
not CPU time) for three parts of a reverse_h10 episode: `train` (the loss's log-probs
forward and backward), `rollout` (KV-cache sampling; n/a for vmap) and `episode`
(train_episode per seed against engine.train_episodes). `--task` gives the `episode`
part another task and its overrides.
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch.func import functional_call, stack_module_state, vmap

from tpo_bench.bench import engine
from tpo_bench.bench.build import build
from tpo_bench.bench.engine import train_episode
from tpo_bench.bench.config import compose
from dev.speed import seed_policies
from tpo_bench.tasks import stacked
from tpo_bench.tasks.seq import generate_seeds


class _SharedPrefix(torch.nn.Module):
    """forward = the policy's forward_shared_prefix, for functional_call."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, prefix, suffix, group: int):
        return self.m.forward_shared_prefix(prefix, suffix, group)


def _logp(first, rest, answers, K):
    logits = torch.cat([first.repeat_interleave(K, -2).unsqueeze(-2), rest], -2)
    return torch.log_softmax(logits, -1).gather(-1, answers.unsqueeze(-1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parts", nargs="+", default=["train", "rollout", "episode"])
    ap.add_argument("--task", nargs="+", default=["task=reverse_h10"])
    args = ap.parse_args()
    if args.task != ["task=reverse_h10"] and args.parts != ["episode"]:
        ap.error("--task is the `episode` part's; the train and rollout parts are reverse_h10's: "
                 "add --parts episode")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # vmap's fallback warning, said in the docstring
    spec = build(compose(*args.task, "algo=tpo", "seed=0"))
    task, B, K = spec.task, getattr(spec.task, "batch_size", 0), spec.request.k
    H = getattr(task, "sequence_length", 0)
    results: dict[tuple[str, str, int], float] = {}

    for S in args.seeds:
        pols, opts, streams = seed_policies(spec, S)
        prompts = torch.randint(0, 2, (S, B, H), generator=torch.Generator().manual_seed(1))
        answers = torch.randint(0, 2, (S, B * K, H), generator=torch.Generator().manual_seed(2))

        def train_loop():
            for s, p in enumerate(pols):
                f, r = p.forward_shared_prefix(prompts[s], answers[s, :, :-1], K)
                _logp(f, r, answers[s], K).sum().backward()

        wrapped = [_SharedPrefix(p) for p in pols]
        base = _SharedPrefix(task.make_policy(torch.Generator().manual_seed(0))).to("meta")

        def train_vmap():
            params, buffers = stack_module_state(wrapped)  # detached leaves: grads stay here
            f, r = vmap(lambda p, b, x, y: functional_call(base, (p, b), (x, y, K)))(
                params, buffers, prompts, answers[:, :, :-1])
            _logp(f, r, answers, K).sum().backward()

        def train_stacked():
            f, r = stacked.Stacked(pols).forward_shared_prefix(prompts, answers[:, :, :-1], K)
            _logp(f, r, answers, K).sum().backward()

        gens = [torch.Generator().manual_seed(s) for s in range(S)]

        def rollout_loop():
            for s, p in enumerate(pols):  # a single run's rollout: the seed axis at S = 1
                generate_seeds([p], prompts[s:s + 1], K, gens[s:s + 1])

        def rollout_stacked():
            generate_seeds(pols, prompts, K, gens)

        def episode_loop():
            for p, o, st in zip(pols, opts, streams):
                train_episode(task, spec.algo, spec.request, p, o, st)

        def episode_stacked():
            engine.train_episodes(task, spec.algo, spec.request, pols, opts, streams)

        variants = {("train", "loop"): train_loop, ("train", "vmap"): train_vmap,
                    ("train", "stacked"): train_stacked,
                    ("rollout", "loop"): rollout_loop, ("rollout", "stacked"): rollout_stacked,
                    ("episode", "loop"): episode_loop, ("episode", "stacked"): episode_stacked}
        variants = {k: f for k, f in variants.items() if k[0] in args.parts}
        cpu = {k: 0.0 for k in variants}
        if S == args.seeds[0]:  # warm-up (allocator, first-call paths), once per variant
            for f in variants.values():
                f()
        for _ in range(args.repeats):
            for key, f in variants.items():
                t0 = time.process_time()
                f()
                cpu[key] += time.process_time() - t0
        for (part, how), seconds in cpu.items():
            results[(part, how, S)] = S * args.repeats / seconds

    print(f"threads={args.threads} repeats={args.repeats} torch {torch.__version__}; "
          "seed-episodes per CPU-second (higher is better)")
    print(f"{'part':8} {'variant':8} " + " ".join(f"{'S=' + str(S):>8}" for S in args.seeds))
    for part, hows in (("train", ("loop", "vmap", "stacked")), ("rollout", ("loop", "vmap", "stacked")),
                       ("episode", ("loop", "stacked"))):
        if part not in args.parts:
            continue
        for how in hows:
            cells = [results.get((part, how, S)) for S in args.seeds]
            print(f"{part:8} {how:8} " + " ".join(f"{c:8.2f}" if c else f"{'n/a':>8}" for c in cells))


if __name__ == "__main__":
    main()
