"""Algorithms: each module turns a `contract.batch.Batch` plus the current policy's
log-probs into a loss. They never import tasks.

An algorithm is a frozen dataclass registered under a name; its fields are its config
(`conf/algo/<name>.yaml` sets them). What it exposes is `contract.batch.Algorithm`, a
`typing.Protocol`: `k`, `epochs`, `loss(batch, logp) -> LossOut`, and optionally `needs`
(one of contract.batch.NEEDS) and `level`.

Losses weigh each candidate's term in a group's sums by `batch.candidate_weights()`
(the sampled action's indicator, or the population probability, where the task set one).
"""
from contract.registry import Registry

ALGORITHMS = Registry("algorithm", "algorithms")
register = ALGORITHMS.register
