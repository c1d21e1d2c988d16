"""Name -> implementation tables for algorithms and tasks, filled from below.

A module registers its class when it is imported (`tasks.register`, `algorithms.register`);
each package imports its own modules, so adding one is a new module plus a yaml in conf/.
This module names no package: the first lookup imports what is advertised under the
`tpo_bench.plugins` entry-point group (the harness's own tasks and algorithms, and any
installed plug-in; in a checkout, pyproject.toml's table as well, which the installed
metadata may predate). Other modules are named in the `plugins` config list.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, TypeVar

from .batch import AlgorithmOptions, TaskOptions

T = TypeVar("T")
PLUGIN_GROUP = "tpo_bench.plugins"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"  # a checkout's, if any


class UnknownName(KeyError):
    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class Registry:
    def __init__(self, kind: str, options: type | None = None):
        """`options`: the class declaring the optional members of this kind (contract.batch);
        a registered class that does not subclass it is given the defaults it lacks."""
        self.kind, self.options = kind, options
        self._table: dict[str, type] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def deco(cls: type[T]) -> type[T]:
            if name in self._table and self._table[name] is not cls:
                raise ValueError(f"{self.kind} {name!r} registered twice "
                                 f"({self._table[name].__module__} and {cls.__module__})")
            self._table[name] = cls
            cls.registered_name = name  # type: ignore[attr-defined]
            if self.options is not None and not issubclass(cls, self.options):
                for member, default in vars(self.options).items():
                    if not member.startswith("_") and not hasattr(cls, member):
                        setattr(cls, member, default)
            return cls
        return deco

    def get(self, name: str) -> type:
        load_plugins()
        if name not in self._table:
            broken = "".join(f"; the plugin {who} failed to import (said above)" for who in BROKEN.values())
            raise UnknownName(f"unknown {self.kind} {name!r}; registered {self.kind}s: "
                              f"{', '.join(self.names())}{broken}")
        return self._table[name]

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._table)


@functools.cache
def advertised() -> tuple[str, ...]:
    """The modules advertised under PLUGIN_GROUP: installed entry points, then a checkout's
    pyproject.toml table (`name = "module"` lines), each once. Read once per process: a
    scan of every installed distribution's metadata costs ~25 ms, and lookups are many."""
    names = [ep.value.partition(":")[0] for ep in entry_points(group=PLUGIN_GROUP)]
    if PYPROJECT.is_file():
        table = re.search(rf'^\[project\.entry-points\."{re.escape(PLUGIN_GROUP)}"\]\n(.*?)(?=^\[|\Z)',
                          PYPROJECT.read_text(), re.M | re.S)
        names += re.findall(r'^[\w.-]+\s*=\s*"([\w.]+)', table.group(1), re.M) if table else []
    return tuple(dict.fromkeys(names))


def public_modules(package: str, path) -> list[str]:
    """Every public module (no leading underscore) in a package's folders (`path`, its
    `__path__`), by full name: what `algorithms` and `tasks` import so that each registers
    itself, and what bench.fingerprint compares with the modules they ship."""
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules(path) if not m.name.startswith("_")]


# Advertised modules that failed to import: module -> who advertised it (said once).
BROKEN: dict[str, str] = {}


def _advertiser(module: str) -> tuple[str, str]:
    """(which entry point advertises `module`, how to take it away)."""
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.value.partition(":")[0] == module:
            dist = getattr(ep, "dist", None)
            name = dist.name if dist is not None else None
            return (f"{ep.name!r} ({module}, a {PLUGIN_GROUP} entry point"
                    f"{f' of the package {name}' if name else ''})",
                    f"`pip uninstall {name or '<its package>'}` disables it")
    return f"{module!r}", f"remove it from {PYPROJECT}'s {PLUGIN_GROUP} table to disable it"


def load_plugins(modules: list[str] | tuple[str, ...] = ()) -> None:
    """Import the advertised modules and the user's `modules` so their @register
    decorators run (a module already imported is not run again). An installed plugin that
    fails to import is named on stderr, once, and left out: the other commands and runs go
    on (the harness's own packages raise as ever)."""
    for mod in advertised():
        if mod in BROKEN:
            continue
        try:
            importlib.import_module(mod)
        except Exception as e:
            if mod.split(".")[0] == "tpo_bench":
                raise
            BROKEN[mod], remedy = _advertiser(mod)
            print(f"warning: the plugin {BROKEN[mod]} failed to import ({type(e).__name__}: {e}): "
                  f"its tasks and algorithms are left out; {remedy}", file=sys.stderr, flush=True)
    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise ImportError(f"plugins: cannot import {mod!r} ({e}); "
                              "put it on PYTHONPATH or install its package") from e


# The two tables: a task module registers with `tasks.register`, an algorithm with
# `algorithms.register` (each package's __init__ hands out these). Held here so that a
# reader of records (analysis) can look a class up without importing either package.
TASKS = Registry("task", TaskOptions)
ALGORITHMS = Registry("algorithm", AlgorithmOptions)
