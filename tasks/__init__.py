"""Tasks: each module produces groups of scored candidates (`contract.batch.Batch`, built
with one of its four named constructors) from a policy it owns. They never import
algorithms.

A task is a frozen dataclass registered under a name; its fields are its config
(`conf/task/<preset>.yaml`). What it exposes is `contract.batch.Task`, a
`typing.Protocol`: `name`, `episodes`, `check_algorithm`, `make_policy`, `rollout`,
`logprobs`, `evaluate`; its optional members, with their defaults, are `contract.batch.TaskOptions` (its base). Each task
keeps what it needs to re-score its candidates in a frozen dataclass of its own
(`batch.obs`), read only by its `logprobs`.
"""
if __name__ == "tasks":  # the top-level name: this module is tpo_bench.tasks
    import tpo_bench

    tpo_bench.alias(__name__)

import importlib
import pkgutil

from tpo_bench.contract.registry import TASKS

register = TASKS.register

# Each module registers itself on import: importing the package fills TASKS.
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
