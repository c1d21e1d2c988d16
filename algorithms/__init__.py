"""Algorithms: each module turns a `contract.batch.Batch` plus the current policy's
log-probs into a loss. They never import tasks.

An algorithm is a frozen dataclass registered under a name; its fields are its config
(`conf/algo/<name>.yaml` sets them). What it exposes is `contract.batch.Algorithm`, a
`typing.Protocol`: `k`, `epochs`, `loss(batch, logp) -> LossOut`; its optional members
(`needs`, `level`, `dynamic_sampling`), with their defaults, are
`contract.batch.AlgorithmOptions` (its base).

Losses weigh each candidate's term in a group's sums by `batch.candidate_weights()`
(the sampled action's indicator, or the population probability, where the task set one).
"""
if __name__ == "algorithms":  # the top-level name: this module is tpo_bench.algorithms
    import tpo_bench

    tpo_bench.alias(__name__)

import importlib
import pkgutil

from tpo_bench.contract.registry import ALGORITHMS

register = ALGORITHMS.register

# Loss metrics that describe the whole update, so the runner averages them over its
# epochs: at the first epoch the policy still is the actor (a ratio of 1: no clipping,
# no KL), so a first-epoch value would say nothing. Loss and gradient norm stay the
# first epoch's, the gradient at the behaviour policy.
OVER_EPOCHS = ("clip_frac", "kl")

# Each module registers itself on import: importing the package fills ALGORITHMS.
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
