"""Algorithms: each module turns a `contract.batch.Batch` plus the current policy's
log-probs into a loss. They never import tasks.

An algorithm is a frozen dataclass registered under a name; its fields are its
config (`conf/algo/<name>.yaml` sets them) and it exposes

    k: int            group size (1 for single-sample methods)
    epochs: int       gradient epochs per rollout batch (SPEC 2)
    needs: str        what it consumes, one of contract.batch.NEEDS (optional: "sample"
                      when the default k is 1, else "sample_group")
    level: str        optional, "sequence" (default) or "token"
    loss(batch, logp) -> LossOut    logp shaped like batch.logp_old

Losses honour `batch.weights` (candidate weights in the group's sums) where present.
"""
from contract.registry import Registry

ALGORITHMS = Registry("algorithm", "algorithms")
register = ALGORITHMS.register
