"""Algorithms: each module turns a `bench.batch.Batch` plus the current policy's
log-probs into a loss. They never import tasks.

An algorithm is a frozen dataclass registered under a name; its fields are its
config (`conf/algo/<name>.yaml` sets them) and it exposes

    k: int            group size (1 for single-sample methods)
    epochs: int       gradient epochs per rollout batch (SPEC 2)
    level: str        "sequence" (one candidate = one sequence) or "token"
    loss(batch, logp) -> LossOut    logp shaped like batch.logp_old
"""
from bench.registry import Registry

ALGORITHMS = Registry("algorithm", "algorithms")
register = ALGORITHMS.register
