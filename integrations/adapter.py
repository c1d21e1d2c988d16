"""Trainer rows -> the harness's `Batch` [N, K, T] -> a registered algorithm's `loss`.

A trainer hands its loss one row per completion: per-token log-probs under the current
policy [B, T], the behaviour (old) ones, the completion mask, each completion's raw score
[B], its group id [B] and its slot in the group [B]. Rows may come in any order (trainers
shuffle) but every group must be whole: a group loss (TPO's target, GRPO's standardised
advantage) on part of a group is another loss, not a noisier one. `regroup` sorts rows by
(group id, slot), so the layout is a function of the rows' contents, not of their order,
and a shuffled batch gives the ordered batch's loss bit for bit.

Padded steps are zeroed in every per-step tensor (the Batch's rule): a candidate's
log-prob is the sum over its real tokens (the paper's form). A completion's per-token
reward is its score on every real token, its success score >= `success_at` (the LLM
task's conventions); both feed only diagnostics.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..contract.batch import GROUP_NEEDS, Batch, LossOut, reference_kl


class PartialGroups(ValueError):
    """The rows do not form whole groups of K."""


@dataclass(frozen=True)
class Grouped:
    batch: Batch
    logp: torch.Tensor
    """[N, K, T] the current policy's per-token log-probs, padded steps 0"""
    index: torch.Tensor
    """[N, K] long: the row each candidate came from"""


def check_fits(algo) -> None:
    """Refuse (ValueError) an algorithm whose loss needs what a trainer's rows do not carry:
    a single-sample method's task-owned advantage, a label, token-level groups, or
    dynamic sampling's extra rollouts."""
    name = getattr(algo, "registered_name", type(algo).__name__)
    needs = getattr(algo, "needs", None)
    if needs not in GROUP_NEEDS:
        raise ValueError(f"algorithm {name!r} consumes {needs!r} batches; a trainer's rows "
                         f"carry sampled groups only ({', '.join(GROUP_NEEDS)}): its advantage "
                         "or label belongs to the harness's task, not to the trainer")
    if getattr(algo, "level", "sequence") != "sequence":
        raise ValueError(f"algorithm {name!r} with level={algo.level!r}: token-level groups "
                         "(K next tokens at every prefix) are not what a trainer samples; "
                         "only level='sequence' fits")
    if getattr(algo, "dynamic_sampling", 0):
        raise ValueError(f"algorithm {name!r} with dynamic_sampling={algo.dynamic_sampling}: "
                         "topping up groups needs the harness's rollouts, not a trainer's batch")


def regroup(group: torch.Tensor, slot: torch.Tensor, k: int) -> torch.Tensor:
    """[N, K] long: the rows of each group in slot order, groups in ascending id. Refuses
    (PartialGroups) any group without exactly k rows, or whose slots are not 0..k-1."""
    group, slot = torch.as_tensor(group).reshape(-1), torch.as_tensor(slot).reshape(-1)
    if group.shape != slot.shape:
        raise ValueError(f"{group.numel()} group ids but {slot.numel()} slots")
    if k < 1:
        raise ValueError(f"group size {k}: expected at least 1")
    ids, counts = torch.unique(group, return_counts=True)
    bad = counts != k
    if bool(bad.any()):
        shown = ", ".join(f"group {int(g)}: {int(c)} rows" for g, c in zip(ids[bad][:5], counts[bad][:5]))
        raise PartialGroups(
            f"partial groups in this batch ({shown}; expected {k} each): a group loss needs "
            "every completion of a prompt in the same loss call. Make each micro-batch hold "
            "whole groups (its size a multiple of the group size, groups not split across "
            "micro-batches or processes)")
    order = torch.argsort(group * k + slot.clamp(0, k - 1), stable=True)
    index = order.reshape(-1, k)
    got = slot[index]
    want = torch.arange(k, device=got.device).expand_as(got)
    if not torch.equal(got, want):
        raise PartialGroups(f"slots inside a group must be 0..{k - 1}, each once; found "
                            f"{got[(got != want).any(-1)][0].tolist()}")
    return index


def check_finite(name: str, x: torch.Tensor, real: torch.Tensor | None = None) -> None:
    """Refuse (ValueError naming `name`) a NaN or infinite value in x, at the real tokens
    only where `real` (the mask) is given: one would make the loss and every gradient NaN."""
    bad = ~torch.isfinite(x) if real is None else ~torch.isfinite(x) & real
    if bool(bad.any()):
        where = bad.nonzero()[0].tolist()
        at = f"row {where[0]}" + (f", token {where[1]}" if len(where) > 1 else "")
        raise ValueError(f"{name} holds {float(x[bad][0])} at {at} ({int(bad.sum())} non-finite "
                         f"value{'s' * (int(bad.sum()) != 1)}{' at real tokens' if real is not None else ''}): "
                         f"the loss and its gradients would be NaN; fix what computed {name}")


def to_batch(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor,
             group: torch.Tensor, slot: torch.Tensor, k: int, *, logp_ref: torch.Tensor | None = None,
             success_at: float = 1.0) -> Grouped:
    """The rows as the harness's Batch (a sampled group) and the current log-probs beside it."""
    mask = mask.bool()
    B, T = mask.shape
    for name, x in (("logp", logp), ("logp_old", logp_old), ("logp_ref", logp_ref)):
        if x is not None and tuple(x.shape) != (B, T):
            raise ValueError(f"{name} has shape {tuple(x.shape)}, the mask {(B, T)}")
    if tuple(scores.shape) != (B,):
        raise ValueError(f"scores has shape {tuple(scores.shape)}, expected ({B},): one per row")
    check_finite("scores", scores)
    for name, x in (("logp", logp), ("logp_old", logp_old), ("logp_ref", logp_ref)):
        if x is not None:
            check_finite(name, x.detach(), mask)  # padded steps are zeroed below
    index = regroup(group.to(mask.device), slot.to(mask.device), k)

    def steps(x: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(~mask, 0)[index]

    m = mask[index]
    s = scores.to(logp.dtype)[index]
    return Grouped(
        batch=Batch.sampled_group(steps(logp_old.detach()), s.unsqueeze(-1) * m.to(s.dtype),
                                  s >= success_at, scores=s, mask=m,
                                  logp_ref=None if logp_ref is None else steps(logp_ref.detach())),
        logp=steps(logp), index=index)


def zoo_loss(algo, logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor,
             scores: torch.Tensor, group: torch.Tensor, slot: torch.Tensor, k: int, *,
             logp_ref: torch.Tensor | None = None, kl_coef: float = 0.0,
             success_at: float = 1.0) -> tuple[LossOut, Grouped]:
    """algo.loss on the regrouped rows, plus kl_coef times the harness's KL to the
    reference (contract.batch.reference_kl) where kl_coef > 0, as the runner adds it."""
    check_fits(algo)
    if kl_coef and logp_ref is None:
        raise ValueError(f"kl_coef={kl_coef} needs the reference policy's log-probs (logp_ref)")
    g = to_batch(logp, logp_old, mask, scores, group, slot, k, logp_ref=logp_ref, success_at=success_at)
    out = algo.loss(g.batch, g.logp)
    if kl_coef:
        kl = reference_kl(g.batch, g.logp)
        out = LossOut(out.loss + kl_coef * kl, {**out.metrics, "kl_ref": kl.detach()})
    return out, g
