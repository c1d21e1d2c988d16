"""Numeric cross-check of the group-RL zoo against verl's and TRL's own loss
code, on the same tensors. Neither library is a dependency (both pull a GPU stack): give
the path of a source checkout of each (a work tree, or a folder holding its files),

    python -m dev.crosscheck_zoo --verl PATH/TO/verl --trl PATH/TO/trl

The named functions are read from those files with `ast` and run as they are (verl:
verl/trainer/ppo/core_algos.py and the masked_* helpers of verl/utils/torch_functional.py;
TRL: GRPOTrainer._compute_loss of trl/trainer/grpo_trainer.py, run with a stand-in for
the trainer's state); nothing of theirs is copied here. Prints one line per comparison:
the largest absolute difference of the loss and of its gradient on the log-probs, and
whether it is within 1e-12 (float64), or the factor an intended difference predicts.
"""
from __future__ import annotations

import argparse
import ast
import math
import sys
import typing
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from tpo_bench.algorithms._advantages import (group_mean_centred, group_std, reinforce_pp_baseline,
                                    rloo)
from tpo_bench.algorithms._aggregate import aggregate
from tpo_bench.algorithms.cispo import CISPO
from tpo_bench.algorithms.clipped import ClippedSurrogate
from tpo_bench.algorithms.gpg import GPG
from tpo_bench.contract.batch import Batch

D = torch.float64
TOL = 1e-12
# verl's seq-mean-token-mean divides each sequence's sum by (its length + 1e-8)
SEQ_MEAN_TOL = 1e-8
N, K, T = 3, 4, 5


def functions(path: Path, names: list[str], namespace: dict, cls: str | None = None) -> dict:
    """Exec the named top-level functions (or methods of class `cls`) of a source file."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    wanted = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in wanted}
    if missing:
        raise SystemExit(f"{path}: not found: {sorted(missing)}")
    for node in wanted:
        node.decorator_list = []
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def report(what: str, ours: torch.Tensor, theirs: torch.Tensor, factor: float = 1.0,
           tol: float = TOL) -> bool:
    """Equal within tol (relative to the largest value, at least 1); `factor` scales
    theirs where a difference is intended."""
    diff = float((ours - factor * theirs).abs().max())
    ok = diff <= tol * max(1.0, float(ours.abs().max()))
    note = "" if factor == 1.0 else f" (theirs x {factor:.12g})"
    within = "" if tol == TOL else f", tolerance {tol:g}"
    print(f"  {'ok  ' if ok else 'DIFF'} {what}: max |ours - theirs{note}| = {diff:.3g}{within}")
    return ok


def data(seed: int = 0, spread: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    logp_old = torch.log_softmax(torch.randn(N, K, T, 6, generator=g, dtype=D), -1)[..., 0]
    logp = logp_old + spread * torch.randn(N, K, T, generator=g, dtype=D)
    scores = (torch.rand(N, K, generator=g, dtype=D) > 0.5).to(D)
    scores[0] = torch.tensor([1.0, 0.25, 0.5, 0.0], dtype=D)  # a dense group
    scores[2] = 1.0  # a flat group
    batch = Batch.sampled_group(logp_old, scores.unsqueeze(-1).expand(N, K, T).clone(),
                                scores >= 1, scores=scores)
    return batch, logp


def ours(algo, batch, logp):
    z = logp.clone().requires_grad_(True)
    loss = algo.loss(batch, z).loss
    loss.backward()
    return loss.detach(), z.grad


class ActorConfig(SimpleNamespace):
    def get(self, key, default=None):
        return getattr(self, key, default)


def tol(mode: str) -> float:
    return SEQ_MEAN_TOL if mode == "seq-mean-token-mean" else TOL


def check_verl(root: Path) -> bool:
    core = root / "verl/trainer/ppo/core_algos.py"
    tf = functions(root / "verl/utils/torch_functional.py",
                   ["masked_sum", "masked_mean", "masked_var", "masked_whiten"], {"torch": torch})
    helpers = ("masked_sum", "masked_mean", "masked_var", "masked_whiten")
    ns = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": typing.Optional,
          "Any": typing.Any, "verl_F": SimpleNamespace(**{k: tf[k] for k in helpers}),
          "ActorConfig": ActorConfig, "AlgoConfig": type("AlgoConfig", (), {}), "DictConfig": dict}
    functions(core, ["agg_loss", "compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage",
                     "compute_reinforce_plus_plus_baseline_outcome_advantage",
                     "compute_policy_loss_vanilla", "compute_policy_loss_gspo",
                     "compute_policy_loss_cispo", "compute_policy_loss_gpg"], ns)
    print(f"verl ({core})")
    ok = True
    batch, logp = data()
    B = N * K
    flat = lambda x: x.reshape(B, T)  # noqa: E731
    ones = torch.ones(B, T, dtype=D)

    # agg_loss against aggregate, under a ragged mask
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, K, T, generator=g, dtype=D)
    lengths = torch.randint(1, T + 1, (N, K), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).to(D)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        ok &= report(f"agg_loss {mode} (ragged mask)", aggregate(x, mode, mask=mask),
                     ns["agg_loss"](flat(x), flat(mask), mode), tol=tol(mode))
    # verl's seq-mean-token-sum-norm divides by loss_scale_factor only; TRL's dr_grpo (ours)
    # by the number of sequences too
    ok &= report("agg_loss seq-mean-token-sum-norm (loss_scale_factor 7) vs constant (T_max 7)",
                 aggregate(x, "constant", mask=mask, max_len=7),
                 ns["agg_loss"](flat(x), flat(mask), "seq-mean-token-sum-norm", loss_scale_factor=7),
                 factor=1 / B)

    # advantages (outcome reward on the last token, so the token sum is the score)
    rewards = torch.zeros(B, T, dtype=D)
    rewards[:, -1] = batch.scores.reshape(B)
    index = np.repeat(np.arange(N), K)
    first = lambda a: a[0][:, 0].view(N, K)  # noqa: E731
    a = ns["compute_grpo_outcome_advantage"](rewards.clone(), ones, index, norm_adv_by_std_in_grpo=False)
    ok &= report("grpo (norm_adv_by_std_in_grpo=False) vs group_mean",
                 group_mean_centred(batch.scores), first(a))
    a = ns["compute_grpo_outcome_advantage"](rewards.clone(), ones, index)
    ok &= report("grpo vs group_std (verl: Bessel std over K, + 1e-6; ours: population, + 1e-8)",
                 group_std(batch.scores), first(a), factor=math.sqrt(K / (K - 1)), tol=1e-5)
    a = ns["compute_rloo_outcome_advantage"](rewards.clone(), ones, index)
    ok &= report("rloo", rloo(batch.scores), first(a))
    a = ns["compute_reinforce_plus_plus_baseline_outcome_advantage"](rewards.clone(), ones, index)
    M = B * T  # verl whitens the B*T tokens with a Bessel-corrected variance, +1e-8 inside
    ok &= report(f"reinforce_plus_plus_baseline (Bessel over M = {M} tokens)",
                 reinforce_pp_baseline(batch.scores), first(a), factor=math.sqrt(M / (M - 1)), tol=1e-7)

    A = group_mean_centred(batch.scores)
    adv = A.unsqueeze(-1).expand(N, K, T).reshape(B, T)

    def theirs(fn, agg, **cfg):
        z = flat(logp).clone().requires_grad_(True)
        config = ActorConfig(global_batch_info={}, **cfg)
        loss, _ = fn(flat(batch.logp_old), z, adv, ones, loss_agg_mode=agg, config=config)
        loss.backward()
        return loss.detach(), z.grad.view(N, K, T)

    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        algo = ClippedSurrogate(advantage="group_mean", aggregation=agg, eps_low=0.2, eps_high=0.28)
        mine = ours(algo, batch, logp)
        ref = theirs(ns["compute_policy_loss_vanilla"], agg, clip_ratio=0.2, clip_ratio_low=0.2,
                     clip_ratio_high=0.28, clip_ratio_c=3.0)
        ok &= report(f"vanilla (dual-clip c=3) {agg}: loss", mine[0], ref[0], tol=tol(agg))
        ok &= report(f"vanilla {agg}: grad", mine[1], ref[1], tol=tol(agg))
    small = logp.detach() - batch.logp_old
    for spread in (1e-3, 0.3):
        lp = batch.logp_old + small * spread / 0.3
        algo = ClippedSurrogate(advantage="group_mean", ratio="sequence", eps_low=3e-4, eps_high=4e-4)
        mine = ours(algo, batch, lp)
        z = flat(lp).clone().requires_grad_(True)
        config = ActorConfig(global_batch_info={}, clip_ratio=0.2, clip_ratio_low=3e-4, clip_ratio_high=4e-4)
        loss, _ = ns["compute_policy_loss_gspo"](flat(batch.logp_old), z, adv, ones, config=config)
        loss.backward()
        label = f"gspo (log-ratio spread {spread})"
        ok &= report(f"{label}: loss", mine[0], loss.detach(), tol=SEQ_MEAN_TOL)
        ok &= report(f"{label}: grad", mine[1], z.grad.view(N, K, T), tol=SEQ_MEAN_TOL)
    mine = ours(CISPO(advantage="group_mean", eps_low=10.0, eps_high=0.2), batch, logp)
    ref = theirs(ns["compute_policy_loss_cispo"], "token-mean", clip_ratio=0.2, clip_ratio_low=10.0,
                 clip_ratio_high=0.2)
    ok &= report("cispo token-mean: loss", mine[0], ref[0])
    ok &= report("cispo token-mean: grad", mine[1], ref[1])
    mine = ours(GPG(rescale=False), batch, logp)
    ref = theirs(ns["compute_policy_loss_gpg"], "token-mean", clip_ratio=0.2)
    ok &= report("gpg policy loss (alpha aside) token-mean: loss", mine[0], ref[0])
    ok &= report("gpg policy loss token-mean: grad", mine[1], ref[1])
    return ok


def check_trl(root: Path) -> bool:
    path = root / "trl/trainer/grpo_trainer.py"
    ns = functions(path, ["_compute_loss"], {"torch": torch, "nanmin": torch.min, "nanmax": torch.max},
                   cls="GRPOTrainer")
    print(f"TRL ({path})")
    batch, logp = data()
    B = N * K
    A = group_mean_centred(batch.scores)

    def theirs(loss_type, level="token", eps_low=0.2, eps_high=0.2, beta=0.0, max_len=T):
        z = logp.reshape(B, T).clone().requires_grad_(True)
        self = SimpleNamespace(
            _get_per_token_logps_and_entropies=lambda *a, **k: (z, torch.zeros(B, T, dtype=D), None),
            top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=level,
            beta=beta, loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high,
            args=SimpleNamespace(delta=None, use_bias_correction_kl=False), use_vllm=False,
            model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
            max_completion_length=max_len, _entropy_bonus_enabled=False, aux_loss_enabled=False,
            accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x,
                                        reduce=lambda x, reduction="sum": x),
            _metrics=defaultdict(lambda: defaultdict(list)))
        ids = torch.zeros(B, T, dtype=torch.long)
        inputs = {"prompt_ids": ids, "prompt_mask": torch.ones(B, T), "completion_ids": ids,
                  "completion_mask": torch.ones(B, T, dtype=D), "advantages": A.reshape(B),
                  "old_per_token_logps": batch.logp_old.reshape(B, T),
                  "ref_per_token_logps": batch.logp_old.reshape(B, T),
                  "num_items_in_batch": torch.tensor(float(B * T), dtype=D)}
        loss = ns["_compute_loss"](self, None, inputs)
        loss.backward()
        return loss.detach(), z.grad.view(N, K, T)

    ok = True
    cases = [
        ("grpo", {}, dict(aggregation="seq-mean-token-mean")),
        ("grpo", dict(beta=0.04), dict(aggregation="seq-mean-token-mean", kl_coef=0.04)),
        ("bnpo", {}, dict(aggregation="token-mean")),
        ("dapo", dict(eps_high=0.28), dict(aggregation="token-mean", eps_high=0.28)),
        ("dr_grpo", dict(max_len=8), dict(aggregation="constant", max_len=8)),
        ("grpo", dict(level="sequence", eps_low=3e-4, eps_high=4e-4),
         dict(aggregation="seq-mean-token-mean", ratio="sequence", eps_low=3e-4, eps_high=4e-4)),
    ]
    for loss_type, trl_kw, our_kw in cases:
        mine = ours(ClippedSurrogate(advantage="group_mean", **our_kw), batch, logp)
        ref = theirs(loss_type, **trl_kw)
        label = f"loss_type={loss_type} {trl_kw}"
        ok &= report(f"{label}: loss", mine[0], ref[0])
        ok &= report(f"{label}: grad", mine[1], ref[1])
    # TRL's cispo caps the weight at epsilon_high itself and has no lower clip
    mine = ours(CISPO(advantage="group_mean", eps_low=10.0, eps_high=4.0), batch, logp)
    ref = theirs("cispo", eps_high=5.0)
    ok &= report("loss_type=cispo epsilon_high=5 vs eps_high=4: loss", mine[0], ref[0])
    ok &= report("loss_type=cispo: grad", mine[1], ref[1])
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verl", type=Path, help="a verl source checkout")
    ap.add_argument("--trl", type=Path, help="a TRL source checkout")
    args = ap.parse_args()
    if not (args.verl or args.trl):
        ap.error("give --verl and/or --trl")
    ok = True
    if args.verl:
        ok &= check_verl(args.verl)
    if args.trl:
        ok &= check_trl(args.trl)
    print("all equal" if ok else "SOME DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
