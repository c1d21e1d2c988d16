"""The config's schema, in one place. The top-level keys are `RunConfig`'s fields (one
default each; adding a key is one line there); `algo.*` and `task.*` are the fields of
the registered dataclass the preset names, `optim.*` the optimizer's arguments,
`logger.*` the chosen logger's dataclass.

    register()          the defaults as Hydra ConfigStore nodes: `run_schema` (typed:
                        RunConfig, so Hydra refuses a wrong type) under conf/config.yaml,
                        typed `schema/logger/<name>`, and `schema/algo/<impl>`,
                        `schema/task/<impl>` under the presets (which hold only what differs)
    run_config(cfg)     a composed config's top level checked against RunConfig
    check_fields(...)   values checked against a dataclass's type hints
    check_overrides()   the command line checked before Hydra composes: group options,
                        keys (the valid ones and a "did you mean") and top-level values
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.bench  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.bench"
from ..contract.identity import NON_IDENTITY_KEYS
from ..contract.schema import MAX_SEED, OUTPUT_ROOT

CONF = Path(__file__).resolve().parent.parent / "conf"
# Config groups whose node is a section of the run config (the rest are Hydra's or
# presets that set top-level keys: experiment, pack).
SECTIONS = ("algo", "task", "optim", "logger")


class ConfigError(ValueError):
    """Bad input, found before any work or directory is created."""


def key(default: Any, doc: str, *, least: int | None = None, hint: str = "",
        choices: tuple = (), most: int | None = None, most_hint: str = "") -> Any:
    """A RunConfig field: its default, what it does (docs/configuration.md's table) and its
    rule (`most`, an upper bound, goes with `least`; `most_hint` says why). Whether it is
    part of the run's identity is contract.identity's to say (`identity_keys`)."""
    meta = {"doc": doc, "least": least, "hint": hint, "choices": choices,
            "most": most, "most_hint": most_hint}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        factory = (lambda d=default: type(d)(d)) if isinstance(default, (list, dict)) else type(default)
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DebugConfig:
    """Test-only fault injection (bench/debug.py); never part of a run's identity."""
    nan_at: int = -1              # make the loss NaN at this step
    nan_error_at: int = -1        # make the error NaN at this step (the loss stays finite)
    sleep: float = 0.0            # seconds to sleep after each episode
    checkpoint_pause: float = 0.0  # seconds between a checkpoint's temp file and its rename


@dataclass
class RunConfig:
    """Every top-level key of `python -m bench`, with its default: a new key is one line."""
    seed: int = key(0, "the run's seed (its three random streams)", least=0, most=MAX_SEED,
                    most_hint=" (2**63 - 1: metrics.parquet stores it as a 64-bit integer)")
    match: str = key("prompts", "matching: every method B prompts per episode, or `interactions`: "
                     "single-sample methods get B * match_k prompts and lr * sqrt(match_k)",
                     choices=("prompts", "interactions"))
    match_k: int = key(8, "K of interaction matching", least=1)
    device: str = key("cpu", "cpu, cuda, cuda:N or mps")
    output_root: str = key(OUTPUT_ROOT, "runs land in `<output_root>/<task.name>/<algo.name>/<config "
                           "hash>/seed=<n>/`")
    threads: int = key(1, "torch threads per run; 1: bitwise-identical metrics for a config and "
                       "seed; 0: the cores this process was allotted (SLURM's, else its affinity)",
                       least=0, hint=" (0: as many as this process was allotted)")
    log_every: int = key(50, "a progress line every N episodes (0: by time only)", least=0,
                         hint=" (0: no line by episode count)")
    progress_every_s: float = key(30.0, "... and at least every this many seconds (the sweep's "
                                  "line too)", least=0, hint=" of seconds (0: a line every episode)")
    force: bool = key(False, "re-run a run whose summary.json says completed")
    resume_across_commits: bool = key(True, "resume a checkpoint written under another git "
                                      "commit (recorded)")
    dry_run: bool = key(False, "with -m: validate every job and list them, launch nothing")
    checkpoint_every: int = key(250, "episodes between checkpoints (resume after a kill or a "
                                "requeue)", least=1)
    seeds_per_job: int = key(1, "a job with seed=s runs seeds s..s+N-1 (packs short runs into "
                             "few jobs)", least=1)
    batch_seeds: bool = key(False, "train those seeds as one stacked computation (bench/engine.py)")
    compile: bool = key(False, "with batch_seeds: capture each epoch's forward and loss "
                        "(torch.compile; bench/engine.py)")
    on_code_change: str = key("refuse", "a completed run recorded under other code (its algorithm, "
                              "task, plugin package or the harness it ran): refuse, rerun or keep "
                              "(its old result); an unfinished one: refuse, rerun from the start, or "
                              "keep (resume under today's code)",
                              choices=("refuse", "rerun", "keep"))
    plugins: list = key([], "extra modules to import (your own algorithms and tasks)",
                        hint=" of module names")
    experiment: Optional[str] = key(None, "set by `+experiment=<name>` (conf/experiment/): a "
                                    "label, not identity")
    seeds: Optional[int] = key(None, "an experiment's seed count (the range its sweep runs)")
    debug: DebugConfig = key(DebugConfig(), "test-only fault injection: nan_at, nan_error_at, "
                             "sleep, checkpoint_pause")


# The `logger` group (bench/tracking.py): each logger's keys and defaults.
@dataclass
class NoLogger:
    name: str = "none"


@dataclass
class TensorBoardLogger:
    name: str = "tensorboard"
    subdir: str = "tensorboard"  # the event files' folder inside the run directory


@dataclass
class WandbLogger:
    name: str = "wandb"
    project: str = "tpo-bench"
    entity: Optional[str] = None
    mode: Optional[str] = None  # online | offline | disabled; unset: online once W&B is configured


@dataclass
class MlflowLogger:
    name: str = "mlflow"
    tracking_uri: Optional[str] = None  # unset: $MLFLOW_TRACKING_URI, else <output_root>/mlruns
    experiment: str = "tpo-bench"


LOGGERS = {"none": NoLogger, "tensorboard": TensorBoardLogger, "wandb": WandbLogger,
           "mlflow": MlflowLogger}


def identity_keys() -> tuple[str, ...]:
    """The top-level keys in a run's identity (its config hash): those contract.identity
    does not leave out."""
    return tuple(f.name for f in dataclasses.fields(RunConfig) if f.name not in NON_IDENTITY_KEYS)


def defaults(cls) -> dict[str, Any]:
    """A dataclass's init fields and their defaults, as plain config values."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        value = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if dataclasses.is_dataclass(value):
            value = defaults(type(value))
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def did_you_mean(word: str, valid, prefix: str = "") -> str:
    """"; did you mean X?" for the closest of `valid` (difflib), else ""."""
    close = difflib.get_close_matches(word, [str(v) for v in valid], n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def unknown_key(full: str, valid, what: str) -> ConfigError:
    """The one line for a key outside the schema: the valid keys, then the closest one."""
    prefix, _, name = full.rpartition(".")
    return ConfigError(f"unknown key {full} for {what}; valid keys: {', '.join(sorted(valid))}"
                       f"{did_you_mean(name, valid, prefix + '.' if prefix else '')}")


def _type_name(want) -> str:
    return getattr(want, "__name__", str(want))


def check_value(full: str, want, value: Any, meta: dict | None = None) -> Any:
    """`value` checked against the type hint `want` (and a RunConfig rule); returns it,
    an int widened to float where a float is wanted."""
    meta = meta or {}
    if typing.get_origin(want) is typing.Union and type(None) in typing.get_args(want):
        if value is None:
            return None
        want = next(a for a in typing.get_args(want) if a is not type(None))
    if want is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{full} must be true or false, got {value!r}")
        return value
    if want in (int, float):
        number = isinstance(value, (int, float) if want is float else int) and not isinstance(value, bool)
        least = meta.get("least")
        if least is None:
            if not number:
                raise ConfigError(f"{full}={value!r} should be of type {want.__name__}")
        elif not number or not math.isfinite(value) or value < least:
            rule = "a positive" if least == 1 else "a non-negative"
            raise ConfigError(f"{full} must be {rule} {'integer' if want is int else 'number'}"
                              f"{meta.get('hint', '')}, got {value!r}")
        if meta.get("most") is not None and value > meta["most"]:
            raise ConfigError(f"{full} must be {'an integer' if want is int else 'a number'} from "
                              f"{least} to {meta['most']}{meta.get('most_hint', '')}, got {value!r}")
        return float(value) if want is float else value
    if want is list and not isinstance(value, (list, tuple)):
        raise ConfigError(f"{full} must be a list{meta.get('hint', '')}, got {value!r}")
    if want is str and not isinstance(value, str):
        raise ConfigError(f"{full}={value!r} should be of type str")
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(f"{full}={value!r} is not one of {', '.join(meta['choices'])}"
                          f"{did_you_mean(str(value), meta['choices'])}")
    return value


def check_fields(prefix: str, cls, values: dict[str, Any], what: str,
                 extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """`values` (a config section) checked against dataclass `cls`: every key one of its
    init fields (or `extra`), every value of the field's type. Returns the values, widened."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    out = {}
    for name, value in values.items():
        if name in extra:
            out[name] = value
            continue
        if name not in fields:
            raise unknown_key(f"{prefix}{name}", [*fields, *extra], what)
        out[name] = check_value(f"{prefix}{name}", hints[name], value, dict(fields[name].metadata))
    return out


def run_config(cfg: dict[str, Any]) -> RunConfig:
    """The top level of a composed config as a RunConfig: unknown keys and bad values
    refused, missing keys at their defaults."""
    top = {k: v for k, v in cfg.items() if k not in (*SECTIONS, "hydra")}
    values = check_fields("", RunConfig, top, "the run config (top level)", extra=())
    debug = values.get("debug")
    if debug is not None:
        if not isinstance(debug, dict):
            raise ConfigError(f"debug must be a mapping of {', '.join(defaults(DebugConfig))}")
        values["debug"] = DebugConfig(**check_fields("debug.", DebugConfig, debug, "debug"))
    return RunConfig(**values)


# ---------------------------------------------------------------- Hydra's view

def composed(*overrides: str, hydra: bool = False):
    """The config `python -m bench OVERRIDES` composes (an OmegaConf node, unresolved;
    with `hydra`, Hydra's own node too), without a subprocess."""
    from hydra import compose as hydra_compose, initialize_config_dir

    try:
        register(listed_plugins(list(overrides)))  # the schema nodes conf/ composes
    except ImportError:  # a plug-in that fails to import: build names it
        register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


def compose(*overrides: str) -> dict:
    """The resolved config a run of `python -m bench OVERRIDES` sees, as plain containers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(composed(*overrides), resolve=True)


def run_schema() -> type:
    """RunConfig with the sections as untyped nodes (their presets hold the schema): the
    node config.yaml composes first."""
    return dataclasses.make_dataclass("RunSchema", [
        (section, Any, field(default_factory=dict)) for section in SECTIONS], bases=(RunConfig,))


def listed_plugins(overrides: list[str]) -> list[str]:
    """The modules a command line's `plugins=[...]` names (its first value in a sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # an override Hydra cannot parse: Hydra says why
        return []
    for o in parsed:
        if o.key_or_group == "plugins" and not o.is_delete():
            value = next(iter(o.sweep_iterator()), None) if o.is_sweep_override() else o.value()
            return [str(v) for v in value] if isinstance(value, list) else []
    return []


def register(plugins: list[str] | tuple[str, ...] = ()) -> None:
    """Store the defaults where conf/ composes them: `run_schema` (config.yaml's first
    default), the loggers' under schema/logger, and each registered algorithm and task
    (plug-ins advertised as entry points or listed in `plugins` included) twice: under
    schema/algo, schema/task (a preset's first default) and under by_name/algo,
    by_name/task, which config.yaml composes under a preset of the same name, so a
    preset holding only `name: arms` comes with its implementation's defaults."""
    from hydra.core.config_store import ConfigStore

    from ..algorithms import ALGORITHMS
    from ..contract.registry import load_plugins
    from ..tasks import TASKS

    cs = ConfigStore.instance()
    if cs.repo.get("run_schema.yaml") is None:
        cs.store(name="run_schema", node=run_schema())  # typed: Hydra refuses a wrong type
        for name, cls in LOGGERS.items():  # typed: Hydra refuses a value of the wrong type
            cs.store(group="schema/logger", name=name, node=cls)
    load_plugins(list(plugins))
    for group, registry in (("algo", ALGORITHMS), ("task", TASKS)):
        for name in registry.names():
            if name not in _STORED[group]:
                node = {"impl": name, **defaults(registry.get(name))}
                cs.store(group=f"schema/{group}", name=name, node=node)
                cs.store(group=f"by_name/{group}", name=name, node=node)
                _STORED[group].add(name)


_STORED: dict[str, set[str]] = {"algo": set(), "task": set()}


def section_keys(section: str, node: dict[str, Any]) -> tuple[list[str], str] | None:
    """The keys a composed algo/task/optim section may hold and what to call it, or None
    when its implementation cannot be looked up (build then says why)."""
    from ..algorithms import ALGORITHMS
    from .optim import OPTIMIZERS
    from ..contract.registry import UnknownName
    from ..tasks import TASKS

    if section == "logger":
        cls = LOGGERS.get(node.get("name"))
        return (sorted(defaults(cls)), f"logger {node.get('name')!r}") if cls else None
    if section == "optim":
        import inspect
        factory = OPTIMIZERS.get(node.get("name"))
        if factory is None:
            return None
        return ["name", *(p for p in inspect.signature(factory).parameters if p != "params")], \
            f"optimizer {node.get('name')!r}"
    registry = {"algo": ALGORITHMS, "task": TASKS}[section]
    impl = node.get("impl") or node.get("name")
    try:
        cls = registry.get(impl)
    except UnknownName:
        return None
    return sorted({f.name for f in dataclasses.fields(cls) if f.init} | {"impl", "name"}), \
        f"{registry.kind} {impl!r}"


def _options(group: str, searchpath: list[str]) -> list[str] | None:
    """The options of a config group: conf/<group> and the user's search path folders (an
    experiment's subfolders too); None where a search path entry is not a folder
    (`pkg://`): Hydra's to judge."""
    if any("://" in p.replace("file://", "", 1) for p in searchpath):
        return None
    names = set()
    for root in [CONF, *(Path(p.removeprefix("file://")) for p in searchpath)]:
        folder = root / group
        if folder.is_dir():
            found = folder.rglob("*.yaml") if group == "experiment" else folder.glob("*.yaml")
            names.update(str(p.relative_to(folder))[: -len(".yaml")] for p in found)
    return sorted(names)


# The groups whose options check_overrides checks, and what an option of each is.
CHOICES = {"algo": "algorithm", "task": "task", "experiment": "experiment"}


def _check_choice(o, searchpath: list[str]) -> None:
    """`algo=NAME`, `task=A,B`, `+experiment=NAME`: each name one of the group's options,
    else the closest ones and every choice. A glob, a range or an interpolation is Hydra's."""
    group = o.key_or_group
    given = o.input_line.partition("=")[2]
    valid = _options(group, searchpath)
    if valid is None or any(c in given for c in "()[]{}$*'\"") or ":" in given:
        return
    for name in _values(o):
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            plus = "+" if group == "experiment" else ""
            raise ConfigError(f"{plus}{group}={name}: no such {CHOICES[group]}; {hint}"
                              f"valid choices: {', '.join(valid)}")


def check_overrides(overrides: list[str]) -> None:
    """Refuse a command line whose keys are outside the schema, before Hydra composes it
    (Hydra's own message would suggest `+` to append the typo)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # an override Hydra cannot parse: Hydra says why
        return
    try:
        register(listed_plugins(overrides))  # a plug-in's schema nodes, before Hydra composes
    except ImportError as e:
        raise ConfigError(str(e)) from None
    top = {f.name for f in dataclasses.fields(RunConfig)}
    groups = {p.name for p in CONF.iterdir() if p.is_dir()} | set(SECTIONS)
    searchpath: list[str] = []
    sectioned: list[tuple[str, str]] = []
    choices: list[str] = []
    for o in parsed:
        if o.key_or_group == "hydra.searchpath":
            searchpath = list(o.value()) if isinstance(o.value(), list) else []
            choices.append(o.input_line)  # the user's presets compose with the choices
    for o in parsed:
        k = o.key_or_group
        if k.startswith("hydra") or o.is_delete() or o.package is not None:
            continue
        head, _, rest = k.partition(".")
        if "/" in head:
            continue  # a nested group (task/arch=...): Hydra knows its options
        if head in CHOICES and not rest:
            _check_choice(o, searchpath)
            choices.append(o.input_line)
        elif head in groups and not rest:
            choices.append(o.input_line)
        elif head in SECTIONS:
            sectioned.append((head, rest))
        elif head == "debug" and rest:
            if rest.split(".")[0] not in defaults(DebugConfig):
                raise unknown_key(f"debug.{rest.split('.')[0]}", defaults(DebugConfig), "debug")
        elif head not in top:
            error = unknown_key(head, sorted(top | set(SECTIONS)), "the run config (top level)")
            raise error if "did you mean" in str(error) else ConfigError(f"{error}{_in_section(head)}")
        elif not rest:
            _check_top_value(o)
            if head == "plugins":
                choices.append(o.input_line)
    if sectioned:
        _check_section_keys(sectioned, choices)


def check_top_value(name: str, value: Any) -> Any:
    """`value` checked against RunConfig's field `name`: its type and its rule."""
    f = next(f for f in dataclasses.fields(RunConfig) if f.name == name)
    return check_value(name, typing.get_type_hints(RunConfig)[name], value, dict(f.metadata))


def _check_top_value(o) -> None:
    """A top-level `key=value`'s value checked against its RunConfig field (Hydra's own
    check of the typed node names the type only); each value of a plain sweep list too.
    An interpolation, a glob or a range is Hydra's."""
    if "$" in o.input_line:
        return
    try:
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
    except Exception:  # a sweep Hydra expands itself
        return
    for value in values:
        check_top_value(o.key_or_group, value)


def _in_section(name: str) -> str:
    """"; did you mean algo.NAME?" where NAME is a key of an algorithm or task."""
    from ..algorithms import ALGORITHMS
    from ..tasks import TASKS

    for section, registry in (("algo", ALGORITHMS), ("task", TASKS)):
        if any(name in {f.name for f in dataclasses.fields(registry.get(n))} for n in registry.names()):
            return f"; did you mean {section}.{name}?"
    return ""


def _values(o) -> list[str]:
    return [str(v) for v in o.sweep_string_iterator()] if o.is_sweep_override() else [str(o.value())]


def _check_section_keys(sectioned: list[tuple[str, str]], choices: list[str]) -> None:
    """algo.X, task.X, optim.X checked against the implementation the chosen preset names:
    the config composed with the group choices alone (the first of a sweep's)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from ..contract.registry import load_plugins

    first = [c.split(",")[0] if "=" in c and "[" not in c else c for c in choices]
    register()
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = OmegaConf.to_container(compose(config_name="config", overrides=first))
        load_plugins(list(cfg.get("plugins") or []))
    except Exception:  # an unknown option, a plug-in that fails: Hydra or build says which
        return
    finally:
        GlobalHydra.instance().clear()
    for section, rest in sectioned:
        found = section_keys(section, cfg.get(section) or {})
        if found is None:
            continue
        valid, what = found
        name = rest.split(".")[0]
        if name and name not in valid:
            raise unknown_key(f"{section}.{name}", [v for v in valid if v != "impl"], what)


def markdown_table() -> str:
    """The top-level keys as docs/configuration.md lists them (`python -m bench.config`)."""
    rows = ["| key | default | in the hash | what |", "| --- | --- | --- | --- |"]
    values = defaults(RunConfig)
    for f in dataclasses.fields(RunConfig):
        value = values[f.name]
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else \
            ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else value
        rows.append(f"| `{f.name}` | `{shown}` | {'yes' if f.name in identity_keys() else 'no'} | "
                    f"{f.metadata['doc']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
