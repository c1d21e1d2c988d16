"""Search spaces. `conf/tune/<algo>.yaml` maps a config key to a distribution:

    optim.lr:    {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    algo.epochs: {type: int, low: 1, high: 8}
    algo.k:      {type: categorical, choices: [4, 8, 16]}

`float` and `int` take low, high and optionally log (bool) or step; `categorical` takes
choices (scalars). The keys are ordinary config keys: a sampled value reaches the job as
the override `key=value`, so a trial's runs are ordinary runs with their own directories.
"""
from __future__ import annotations

from typing import Any

KINDS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
         "categorical": {"choices"}}


class SpaceError(ValueError):
    """A malformed search space, found before any study is created."""


def check_space(space: Any, where: str) -> dict[str, dict]:
    """The space as plain dicts, every entry validated; `where` names the file in errors."""
    if not isinstance(space, dict) or not space:
        raise SpaceError(f"{where}: expected a non-empty mapping of config key -> distribution")
    out = {}
    for key, spec in space.items():
        if not isinstance(spec, dict) or spec.get("type") not in KINDS:
            raise SpaceError(f"{where}: {key}: needs type: one of {', '.join(KINDS)}")
        kind = spec["type"]
        unknown = set(spec) - KINDS[kind] - {"type"}
        if unknown:
            raise SpaceError(f"{where}: {key}: unknown field {sorted(unknown)[0]!r} for type "
                             f"{kind} (valid: {', '.join(sorted(KINDS[kind]))})")
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices or any(
                    isinstance(c, (dict, list)) for c in choices):
                raise SpaceError(f"{where}: {key}: choices must be a non-empty list of scalars")
        else:
            num = float if kind == "float" else int
            lo, hi = spec.get("low"), spec.get("high")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi)) \
                    or (num is int and not all(isinstance(v, int) for v in (lo, hi))) or lo >= hi:
                raise SpaceError(f"{where}: {key}: needs numeric low < high ({kind}), got {lo!r}, {hi!r}")
            if spec.get("log") and lo <= 0:
                raise SpaceError(f"{where}: {key}: log: true needs low > 0")
        out[str(key)] = dict(spec)
    return out


def suggest(trial, space: dict[str, dict]) -> dict[str, Any]:
    """One value per key from an optuna trial (enqueued trials return their fixed values)."""
    params = {}
    for key, spec in space.items():
        kind = spec["type"]
        if kind == "categorical":
            params[key] = trial.suggest_categorical(key, spec["choices"])
        else:
            suggest_num = trial.suggest_float if kind == "float" else trial.suggest_int
            extra = {k: spec[k] for k in ("log", "step") if spec.get(k) is not None}
            params[key] = suggest_num(key, spec["low"], spec["high"], **extra)
    return params


def as_override(key: str, value: Any) -> str:
    """`key=value` as Hydra parses it back to the same value (repr keeps floats exact)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = repr(value)
    elif value is None:
        text = "null"
    else:
        text = str(value)
    return f"{key}={text}"
