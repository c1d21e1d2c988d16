"""Name -> implementation tables for algorithms and tasks.

Every module inside the `algorithms` / `tasks` packages is imported on first lookup, so
adding one is a new module plus a yaml in conf/: no list to edit. Modules outside the
repo are named in the `plugins` config list (or advertised under the
`tpo_bench.plugins` entry-point group) and imported before lookup.
"""
from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Callable, TypeVar

from tpo_bench.contract.batch import AlgorithmOptions, TaskOptions

T = TypeVar("T")


class UnknownName(KeyError):
    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class Registry:
    def __init__(self, kind: str, package: str, options: type | None = None):
        """`options`: the class declaring the optional members of this kind (contract.batch);
        a registered class that does not subclass it is given the defaults it lacks."""
        self.kind, self.package, self.options = kind, package, options
        self._table: dict[str, type] = {}
        self._discovered = False

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

    def discover(self) -> None:
        if self._discovered:
            return
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")
        self._discovered = True

    def get(self, name: str) -> type:
        self.discover()
        if name not in self._table:
            raise UnknownName(f"unknown {self.kind} {name!r}; registered {self.kind}s: "
                              f"{', '.join(self.names())}")
        return self._table[name]

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._table)


def load_plugins(modules: list[str] | tuple[str, ...] = ()) -> None:
    """Import user modules so their @register decorators run."""
    for ep in entry_points(group="tpo_bench.plugins"):
        ep.load()
    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise ImportError(f"plugins: cannot import {mod!r} ({e}); "
                              "put it on PYTHONPATH or install its package") from e


# The two tables: a task module registers with `tasks.register`, an algorithm with
# `algorithms.register` (each package's __init__ hands out these). Held here so that a
# reader of records (analysis) can look a class up without importing either package.
TASKS = Registry("task", "tpo_bench.tasks", TaskOptions)
ALGORITHMS = Registry("algorithm", "tpo_bench.algorithms", AlgorithmOptions)
