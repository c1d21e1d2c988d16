"""`python -m tools.llm_scale task=<llm preset> [overrides] [--steps N] [--forward-only]
[--max-gib G] [--csv PATH]`: the memory and throughput of an LLM preset's RL step, with
random weights from its architecture facts (no download, no warm start, nothing cached).

RL steps (default): the preset's own path (bench.runner.train_episode) `--steps` times:
sample, the algorithm's loss over algo.epochs, backward, AdamW. `--forward-only`: build the
model and run one short forward (parameter count and weight memory). Printed and written
as one CSV row: parameters (total, trainable), sizes (N, K, T, longest prompt P), tokens
generated and trained per second, peak memory (CUDA max allocated; on a CPU peak RSS) and
the fraction of trainable weights the steps changed. On a CPU, shrink the sizes with
overrides. Without task.model_path the weights are random (every group's scores equal, so
the gradients are noise, but compute and memory are a real step's); with it the real model
is measured. An estimate over --max-gib (default 12 on a CPU) is refused before building.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.tools  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.tools"
from ..bench.build import ConfigError, build
from ..bench.optim import build_optimizer
from ..bench.engine import train_episode
from ..bench.config import compose
from ..contract.rng import Streams
from ..contract.schema import OUTPUT_ROOT
from ..tasks import _lm
from ..tasks.llm import DTYPES, compute

GIB = 2 ** 30
CPU_MAX_GIB = 12.0


@dataclass(frozen=True)
class Probe:
    """One probe's facts (a CSV row)."""
    task: str
    mode: str  # "rl_steps" or "forward_only"
    device: str
    dtype: str
    lora_rank: int
    checkpointing: bool
    layers: int
    parameters: int  # the policy's, LoRA adapters included
    trainable: int
    estimate_gib: float
    memory: str  # what peak_gib measures
    baseline_gib: float
    peak_gib: float
    seconds: float
    prompts: int = 0
    k: int = 0
    max_new_tokens: int = 0
    prompt_tokens: int = 0
    steps: int = 0
    completions: int = 0
    generated_tokens: int = 0
    trained_tokens: int = 0
    generation_s: float = 0.0
    training_s: float = 0.0
    updated: float = float("nan")

    @property
    def generated_per_s(self) -> float:
        return self.generated_tokens / self.generation_s if self.generation_s else float("nan")

    @property
    def trained_per_s(self) -> float:
        return self.trained_tokens / self.training_s if self.training_s else float("nan")

    def row(self) -> dict:
        return {**dataclasses.asdict(self), "generated_per_s": self.generated_per_s,
                "trained_per_s": self.trained_per_s}


# ---------------------------------------------------------------- measuring

class SampleMeter:
    """What _lm.sample generates while `active`: completions, real tokens (up to and
    including each EOS), the longest prompt, seconds. The task's own rollout calls it."""

    def __init__(self, device: torch.device):
        self.device = device
        self.completions = self.tokens = self.prompt_tokens = 0
        self.seconds = 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def active(self):
        original = _lm.sample

        def metered(model, ids, *args, **kwargs):
            self._sync()
            t0 = time.perf_counter()
            out = original(model, ids, *args, **kwargs)
            self._sync()
            self.seconds += time.perf_counter() - t0
            self.completions += out["mask"].shape[0]
            self.tokens += int(out["mask"].sum())
            self.prompt_tokens = max(self.prompt_tokens, ids.shape[1])
            return out

        _lm.sample = metered
        try:
            yield self
        finally:
            _lm.sample = original


def rss_gib() -> float:
    """This process's resident memory now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GIB


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # KiB on Linux


def memory_kind(device: torch.device) -> str:
    return "cuda max allocated" if device.type == "cuda" else "process peak RSS"


def memory_now(device: torch.device) -> float:
    return torch.cuda.memory_allocated(device) / GIB if device.type == "cuda" else rss_gib()


def peak(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    return peak_rss_gib()


def estimate_gib(arch: dict, dtype: str, lora_rank: int, training: bool) -> tuple[int, float]:
    """(parameters, GiB) of a model from `arch` before building it: its weights, the frozen
    reference copy of a full fine-tune and, when training, gradients and AdamW's two
    moments of the trained weights (LoRA: the adapters', small beside the base, left out).
    Activations are not included."""
    weights = DTYPES[dtype][0]
    with torch.device("meta"):
        n = _lm.param_count(_lm.from_arch(arch, weights, 0))
    size = torch.empty((), dtype=weights).element_size()
    copies = 1 if lora_rank else 2 + (3 if training else 0)
    return n, n * size * copies / GIB


def trainable(policy) -> list[torch.nn.Parameter]:
    return [p for p in policy.parameters() if p.requires_grad]


def updated_fraction(before: list[torch.Tensor], after: list[torch.nn.Parameter]) -> float:
    changed = sum(int((b != a.detach().to("cpu", b.dtype)).sum()) for b, a in zip(before, after))
    return changed / max(1, sum(b.numel() for b in before))


# ---------------------------------------------------------------- the two probes

def rl_steps(cfg: dict, steps: int) -> Probe:
    spec = build(cfg)
    task, algo = spec.task, spec.algo
    device = torch.device(spec.run.device)
    streams = Streams.from_seed(spec.run.seed, spec.run.device)
    baseline = memory_now(device)
    t0 = time.perf_counter()
    policy = task.make_policy(streams.init).to(device)
    params = trainable(policy)
    opt = build_optimizer(spec.optim_name, params, **spec.optim_hparams)
    before = [p.detach().to("cpu", copy=True) for p in params]
    meter, clock, trained = SampleMeter(device), {}, 0
    with meter.active():
        for _ in range(steps):
            row = train_episode(task, algo, spec.request, policy, opt, streams, clock)
            trained += row["tokens"] * algo.epochs
    # a model from task.model_path is not the preset's task.arch: no estimate
    est = 0.0 if task.model_path else estimate_gib(task.arch, task.dtype, task.lora_rank, True)[1]
    return Probe(task=task.name, mode="rl_steps", device=str(device), dtype=task.dtype,
                 lora_rank=task.lora_rank, checkpointing=task.gradient_checkpointing,
                 layers=int(task.arch.get("num_hidden_layers", 0)),
                 parameters=_lm.param_count(policy.model), trainable=sum(p.numel() for p in params),
                 estimate_gib=est, memory=memory_kind(device), baseline_gib=baseline,
                 peak_gib=peak(device), seconds=time.perf_counter() - t0,
                 prompts=task.prompts_per_step, k=spec.request.k,
                 max_new_tokens=task.max_new_tokens, prompt_tokens=meter.prompt_tokens,
                 steps=steps, completions=meter.completions, generated_tokens=meter.tokens,
                 trained_tokens=trained, generation_s=meter.seconds,
                 training_s=clock.get("training", 0.0), updated=updated_fraction(before, params))


def forward_only(cfg: dict) -> Probe:
    """The policy of the preset's architecture and one forward of a few tokens. Reads the
    task section as composed (no task is built: no data set is read)."""
    t = cfg["task"]
    device = torch.device(cfg.get("device", "cpu"))
    if t["dtype"] not in DTYPES:
        raise ConfigError(f"task.dtype={t['dtype']!r} is not one of {', '.join(DTYPES)}")
    baseline = memory_now(device)
    t0 = time.perf_counter()
    model = _lm.from_arch(t["arch"], DTYPES[t["dtype"]][0], int(t.get("base_seed", 0)))
    tok = _lm.char_tokenizer()
    policy = _lm.make_policy(model, tok, int(t["lora_rank"]), bool(t["gradient_checkpointing"])).to(device)
    ids, att = _lm.encode_prompts(tok, ["12 + 30 ="], device)
    with torch.no_grad(), compute(t["dtype"], device):
        policy.model(input_ids=ids, attention_mask=att, logits_to_keep=1)
    est = estimate_gib(t["arch"], t["dtype"], int(t["lora_rank"]), False)[1]
    return Probe(task=t["name"], mode="forward_only", device=str(device), dtype=t["dtype"],
                 lora_rank=int(t["lora_rank"]), checkpointing=bool(t["gradient_checkpointing"]),
                 layers=int(t["arch"].get("num_hidden_layers", 0)), parameters=_lm.param_count(policy.model),
                 trainable=sum(p.numel() for p in trainable(policy)), estimate_gib=est,
                 memory=memory_kind(device), baseline_gib=baseline, peak_gib=peak(device),
                 seconds=time.perf_counter() - t0, prompt_tokens=ids.shape[1])


# ---------------------------------------------------------------- the command

def probe_overrides(cfg: dict) -> list[str]:
    """Random weights and raw prompts where the preset has no weights of its own."""
    if cfg["task"].get("model_path"):
        return []
    return ["task.from_arch=random", "task.prompt_format=raw", "task.warm_start_steps=0"]


# what a forward-only probe leaves empty: not printed
FORWARD_ONLY_EMPTY = ("prompts", "k", "max_new_tokens", "steps", "completions", "generated_tokens",
                      "trained_tokens", "generation_s", "training_s", "updated",
                      "generated_per_s", "trained_per_s")


def table(p: Probe) -> str:
    fmt = {float: lambda v: f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}", int: lambda v: f"{v:,}"}
    return "\n".join(f"{k:<18} {fmt.get(type(v), str)(v)}" for k, v in p.row().items()
                     if not (p.mode == "forward_only" and k in FORWARD_ONLY_EMPTY))


def write_csv(path: Path, p: Probe) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(p.row()))
        writer.writeheader()
        writer.writerow(p.row())


def run(overrides: list[str], steps: int = 1, forward: bool = False,
        max_gib: float | None = None) -> Probe:
    cfg = compose(*overrides)
    if cfg["task"].get("impl") != "llm":
        raise ConfigError(f"task={cfg['task'].get('name')!r} is not an LLM task (task.impl=llm)")
    extra = probe_overrides(cfg)
    if extra:
        cfg = compose(*overrides, *extra)
        print(f"random weights from task.arch: {' '.join(extra)}", file=sys.stderr)
    t, device = cfg["task"], torch.device(cfg.get("device", "cpu"))
    limit = max_gib if max_gib is not None else (None if device.type == "cuda" else CPU_MAX_GIB)
    if t.get("arch") and not t.get("model_path") and limit is not None:
        n, est = estimate_gib(t["arch"], t["dtype"], int(t["lora_rank"]), not forward)
        if est > limit:
            parts = ["the weights"] + ([] if t["lora_rank"] else ["the reference copy"]) + (
                [] if forward else ["the gradients and AdamW state"])
            raise ConfigError(
                f"{n:,} parameters at task.dtype={t['dtype']}: {', '.join(parts[:-1])}"
                f"{' and ' if len(parts) > 1 else ''}{parts[-1]} come to {est:.1f} GiB, over "
                f"--max-gib {limit:g}; nothing was built (shrink task.arch, e.g. "
                f"task.arch.num_hidden_layers{'' if forward else ', or use --forward-only'}, "
                "or raise --max-gib)")
    torch.set_num_threads(int(cfg.get("threads") or os.cpu_count() or 1))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return forward_only(cfg) if forward else rl_steps(cfg, steps)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.llm_scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. task=llm_gsm8k device=cuda")
    ap.add_argument("--steps", type=int, default=1, help="RL steps to run and time (default 1)")
    ap.add_argument("--forward-only", action="store_true", help="build the model, one forward of a few tokens")
    ap.add_argument("--max-gib", type=float, default=None,
                    help=f"refuse above this estimate (default {CPU_MAX_GIB:g} on a CPU, none on a GPU)")
    ap.add_argument("--csv", default=f"{OUTPUT_ROOT}/llm_scale.csv", help="where the row goes")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    try:
        probe = run(args.overrides, args.steps, args.forward_only, args.max_gib)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(probe))
    write_csv(Path(args.csv), probe)
    print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
