"""Run identity: a short hash of the resolved scientific config.

Seed, launcher, device, paths and logging knobs are left out, so the seeds of one
config share a hash and any change to what is being run (algo.k, a learning rate,
task.vocab_size, ...) gets a directory of its own. So are the preset names (task.name,
algo.name): they are labels, and `task=reversal_v2` and `task=seq` with the same fields,
or `algo=grpo_no_kl` and `algo=grpo algo.kl_coef=0`, are one run under one hash.

Runs recorded before the names left the hash carry a `legacy_hash` (names included):
`python -m tools.migrate ROOT` re-keys their directories, and tables written before
are re-keyed as they are read (`tools.migrate.rekey_table`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from bench.config import RunConfig

# Top-level config keys that do not change the science of a run: every RunConfig key
# not marked identity, Hydra's node, the logger, and `seeds` (an experiment's seed count).
NON_IDENTITY_KEYS = frozenset(
    {f.name for f in dataclasses.fields(RunConfig) if not f.metadata["identity"]}
    | {"hydra", "logger", "seeds"})
# Keys inside a section that name a preset rather than say what runs.
LABEL_KEYS = {"task": "name", "algo": "name"}


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The science of a config: without the non-identity keys and the preset names."""
    out = {k: v for k, v in config.items() if k not in NON_IDENTITY_KEYS}
    for section, label in LABEL_KEYS.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k != label}
    return out


def _digest(tree: dict[str, Any], length: int) -> str:
    blob = json.dumps(tree, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def config_hash(config: dict[str, Any], length: int = 10) -> str:
    return _digest(identity(config), length)


def legacy_hash(config: dict[str, Any], length: int = 10) -> str:
    """The hash runs were recorded under before the preset names left it (until commit
    e6ccdb1): the same config with task.name and algo.name in."""
    return _digest({k: v for k, v in config.items() if k not in NON_IDENTITY_KEYS}, length)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted columns for parquet: {'task': {'name': 'x'}} -> {'task.name': 'x'}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(list(value))
        else:
            out[name] = value
    return out
