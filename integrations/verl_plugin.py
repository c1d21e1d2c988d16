"""TPO inside verl, registered from the `verl.plugins` entry point (pyproject.toml), which
`import verl` loads: `algorithm.adv_estimator=tpo` (u, each response's score
standardised over its uid by the harness's `standardise`, on its tokens) and
`actor_rollout_ref.actor.policy_loss.loss_mode=tpo`.

verl hands a policy loss per-token tensors and advantages only: no uid, no raw score. The
loss reads each row's u back, takes a micro-batch's rows as consecutive groups of
`rollout_n` (the legacy trainer's rollout order; the advantage, which sees the uids,
refuses any other) and calls the harness's TPO through integrations.adapter; u
standardised again is u (up to rounding), so the target is the raw scores'. What would
break that order is refused (below; `check_trainer_config` for the trainer's settings).
Where verl fills `global_batch_info`, a micro-batch's loss (TPO's mean over its groups) is
scaled by rows * dp_size / global_batch_size, so summed micro-batches give the
mini-batch's mean over groups. TPO's loss is per group: `loss_agg_mode` does not enter it.
"""
from __future__ import annotations

import torch

from ..algorithms._common import standardise
from ..algorithms.tpo import TPO
from .adapter import regroup, zoo_loss

try:
    from verl.trainer.ppo.core_algos import register_adv_est, register_policy_loss
except ImportError as e:  # pragma: no cover
    raise ImportError(f"integrations.verl_plugin needs verl ({e}); pip install 'tpo-bench[verl]' "
                      "in an environment of its own (verl pins transformers<5.11)") from e

NAME = "tpo"
BLOCK_TOL = 1e-4  # |sum of u over a block of rollout_n rows| above this (per row): not a group


def _get(cfg, key: str, default=None):
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


# Refused, each with its reason: verl 0.9's default trainer (trainer.use_v1=True: its rows
# come in the order completions finish and are reordered across data-parallel ranks by
# length at every step, whatever balance_batch says), trainer.balance_batch (the legacy
# trainer's reordering by length), rows that are not consecutive groups by uid when the
# advantage is computed, actor.shuffle, actor.use_dynamic_bsz, a micro-batch not a multiple
# of rollout_n, rollout importance-sampling weights. The loss also checks each block of
# rollout_n rows sums its u to 0, as a whole group of standardised scores does.
USE_LEGACY = "set trainer.use_v1=False (the legacy trainer) and trainer.balance_batch=False"

def check_trainer_config(config) -> None:
    """Refuse (ValueError) a verl PPO trainer config (the full one: trainer, algorithm,
    actor_rollout_ref) that would reorder or split TPO's groups."""
    trainer, algorithm = _get(config, "trainer"), _get(config, "algorithm")
    arr = _get(config, "actor_rollout_ref")
    actor, rollout = _get(arr, "actor"), _get(arr, "rollout")
    if _get(trainer, "use_v1", True):
        raise ValueError("trainer.use_v1=True (verl 0.9's default trainer) does not keep a prompt's "
                         "rollout.n rows together: it stores them as completions finish and, at "
                         "every step, reorders them across data-parallel ranks by length whatever "
                         f"trainer.balance_batch says. For TPO, {USE_LEGACY}")
    if _get(trainer, "balance_batch", True):
        raise ValueError("trainer.balance_batch=True reorders rows across data-parallel ranks by "
                         f"length, splitting groups. For TPO, {USE_LEGACY}")
    if _get(algorithm, "adv_estimator") != NAME:
        raise ValueError(f"algorithm.adv_estimator={_get(algorithm, 'adv_estimator')!r}: TPO's loss reads "
                         f"the standardised scores of adv_estimator={NAME!r}")
    check_actor_config(actor, n=_get(rollout, "n"))


def check_actor_config(actor, n: int | None = None) -> None:
    n = n or _get(actor, "rollout_n")
    if _get(actor, "shuffle", False):
        raise ValueError("actor.shuffle=True shuffles rows inside a mini-batch, splitting groups "
                         "across micro-batches; set actor.shuffle=False for TPO")
    if _get(actor, "use_dynamic_bsz", False):
        raise ValueError("actor.use_dynamic_bsz=True cuts micro-batches by token count, not by "
                         "group; set it False and ppo_micro_batch_size_per_gpu to a multiple of rollout.n")
    micro = _get(actor, "ppo_micro_batch_size_per_gpu")
    if n and micro and micro % n:
        raise ValueError(f"actor.ppo_micro_batch_size_per_gpu={micro} is not a multiple of "
                         f"rollout.n={n}: a micro-batch must hold whole groups")


def tpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, config=None,
                  **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """u: each response's score (its token rewards summed) standardised over its uid's
    group, on its response tokens. The groups must be whole, of one size and each in
    consecutive rows (the order the loss reads them in)."""
    scores = token_level_rewards.sum(-1)
    ids: dict = {}
    group = torch.tensor([ids.setdefault(u, len(ids)) for u in list(index)], device=scores.device)
    counts = torch.bincount(group)
    k = int(counts[0])
    seen = torch.zeros(len(ids), dtype=torch.long, device=scores.device)
    slot = torch.empty_like(group)
    for i, g in enumerate(group.tolist()):  # slot = order of appearance inside the uid
        slot[i] = seen[g]
        seen[g] += 1
    rows = regroup(group, slot, k)
    apart = (group != torch.arange(len(group), device=group.device) // k).nonzero()
    if len(apart):
        row = int(apart[0])
        raise ValueError(f"rows are not consecutive groups of rollout.n={k} (from row {row}, uid "
                         f"{list(index)[row]!r}): TPO's loss reads each block of {k} rows as one "
                         f"prompt's, and a trainer reordered them; {USE_LEGACY}")
    u = torch.empty_like(scores)
    u[rows.reshape(-1)] = standardise(scores[rows]).reshape(-1)
    adv = u.unsqueeze(-1) * response_mask
    return adv, adv


def tpo_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                    response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                    rollout_is_weights: torch.Tensor | None = None, algorithm=None):
    """TPO's loss on a micro-batch of consecutive whole groups (see the module's notes)."""
    algorithm = algorithm or TPO()
    if rollout_is_weights is not None:
        raise ValueError("rollout importance-sampling weights reweight tokens; TPO's group loss "
                         "has no such term: turn algorithm.rollout_correction off")
    check_actor_config(config)
    n = int(_get(config, "rollout_n"))
    B = log_prob.shape[0]
    if B % n:
        raise ValueError(f"a micro-batch of {B} rows is not whole groups of rollout.n={n}")
    mask = response_mask.bool()
    u = (advantages * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    drift = u.view(-1, n).sum(-1).abs()
    if bool((drift > BLOCK_TOL * n).any()):
        raise ValueError("rows are not consecutive groups of rollout.n: a block's standardised "
                         f"scores sum to {float(drift.max()):.3g}, not 0 (a reordering after the "
                         f"advantage, or before it: {USE_LEGACY})")
    rows = torch.arange(B, device=log_prob.device)
    out, _ = zoo_loss(algorithm, log_prob, old_log_prob, mask, u, rows // n, rows % n, n,
                      success_at=float("inf"))
    loss = out.loss
    info = _get(config, "global_batch_info") or {}
    if info.get("global_batch_size"):
        loss = loss * B * (info.get("dp_size") or 1) / info["global_batch_size"]
    return loss, {f"actor/tpo_{k}": float(v) for k, v in out.metrics.items() if float(v) == float(v)}


register_adv_est(NAME)(tpo_advantage)
register_policy_loss(NAME)(tpo_policy_loss)
