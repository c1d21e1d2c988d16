"""How the zoo's token-level losses reduce a per-step loss l [N, K, T] to a scalar (the
`aggregation` parameter), with candidate weights w_nk (batch.candidate_weights()) and an
optional step mask m [N, K, T] (batch.mask; m = 1 where there is none):

    token-mean            L = sum_nkt w m l / sum_nkt w m                 DAPO, BNPO, CISPO, GPG
    seq-mean-token-mean   L = sum_nk w (sum_t m l / sum_t m) / sum_nk w   GRPO as TRL, GSPO
    seq-mean-token-sum    L = sum_nk w (sum_t m l) / sum_nk w             REINFORCE form (RLOO)
    constant              L = sum_nkt w m l / (sum_nk w * T_max)          Dr. GRPO

Sequence means count the sequences with at least one step (verl agg_loss); `constant`
counts every sequence (TRL dr_grpo); T_max is the generation budget, by default the batch's
T. Without a mask and T_max = T, the first three and `constant` are one number and
seq-mean-token-sum is T times it: a constant factor the normalised optimisers all but
cancel. They part only where lengths differ or T_max > T.
"""
from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "constant")


def _positive(x: torch.Tensor) -> torch.Tensor:
    """A count or weight sum as a divisor: 1 where it is 0 (nothing to average, sum 0)."""
    return torch.where(x > 0, x, torch.ones_like(x))


def aggregate(loss: torch.Tensor, mode: str, weights: torch.Tensor | float = 1.0,
              mask: torch.Tensor | None = None, max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-step loss [N, K, T] by `mode` (AGGREGATIONS); weights [N, K] or a
    scalar; mask [N, K, T] of 0/1 or None; max_len: constant's T_max (None: T)."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation {mode!r} is not one of {', '.join(AGGREGATIONS)}")
    T = loss.shape[-1]
    m = torch.ones_like(loss) if mask is None else mask.to(loss.dtype)
    w = torch.as_tensor(weights, dtype=loss.dtype, device=loss.device).expand(loss.shape[:-1])
    token_sum = (loss * m).sum(-1)            # [N, K]
    length = m.sum(-1)                        # [N, K]
    if mode == "token-mean":
        return (w * token_sum).sum() / _positive((w * length).sum())
    if mode == "constant":
        t_max = T if max_len is None else max_len
        if t_max < T:
            raise ValueError(f"algo.max_len={max_len} is below the batch's {T} steps: "
                             "the constant normaliser is the longest possible sequence")
        return (w * token_sum).sum() / _positive(w.sum() * t_max)
    seq = token_sum / _positive(length) if mode == "seq-mean-token-mean" else token_sum
    counted = w * (length > 0).to(loss.dtype)
    return (counted * seq).sum() / _positive(counted.sum())
