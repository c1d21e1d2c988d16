"""The floors of the house: the contract imports none of the runner, tasks or
algorithms; tasks and algorithms never import each other nor the runner; and no import
cycle between the project's modules. Read from the source with `ast` (every import, at
the top or inside a function), so a lazy import cannot hide an arrow."""
import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGES = ("contract", "bench", "tasks", "algorithms", "analysis", "hydra_plugins", "reproduction")
# package -> the project packages it may import (itself always)
MAY_IMPORT = {
    "contract": set(),
    "tasks": {"contract"},
    "algorithms": {"contract"},
    "bench": {"contract", "tasks", "algorithms", "hydra_plugins"},  # __main__ registers the sweepers
    "hydra_plugins": {"contract", "bench"},
    "analysis": {"contract", "bench", "tasks", "algorithms"},  # a preset's values need its dataclass
    "reproduction": {"contract", "bench", "tasks", "algorithms", "analysis"},
}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported(path: Path, known: set[str]) -> set[str]:
    """The project modules a file imports (a `from pkg import name` counts pkg.name when
    that is a module, else pkg)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in PACKAGES:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                found.add(full if full in known else node.module)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imported(p, set(mods)) - {m} for m, p in mods.items()}


@pytest.mark.parametrize("pkg", sorted(MAY_IMPORT))
def test_each_floor_imports_only_the_floors_below(pkg):
    wrong = sorted((m, t) for m, targets in graph().items() if m.split(".")[0] == pkg
                   for t in targets if t.split(".")[0] not in MAY_IMPORT[pkg] | {pkg})
    assert not wrong, f"{pkg} reaches up: {wrong}"


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles = []

    def visit(m, path):
        state[m] = 1
        for t in sorted(g.get(m, ())):
            if state.get(t) == 1:
                cycles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_the_checker_sees_an_arrow_and_a_cycle(tmp_path, monkeypatch):
    """The rules can fail: a task importing an algorithm, and two modules importing each
    other, are both caught."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "algorithms").mkdir()
    (tmp_path / "tasks" / "t.py").write_text("from algorithms import a\n")
    (tmp_path / "algorithms" / "a.py").write_text("def f():\n    import tasks.t\n")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    with pytest.raises(AssertionError, match="tasks reaches up"):
        test_each_floor_imports_only_the_floors_below("tasks")
    with pytest.raises(AssertionError, match="tasks.t"):
        test_no_import_cycle()
