"""The code a run used, as one short hash (summary.json's `code_fingerprint`).

Over the source of the algorithm's and the task's modules, the modules they import from
the project's `algorithms`, `tasks` and `contract` packages (and theirs, transitively),
and the module, inside the repository or not (a plugin), that defines each class.
Each file is normalised through Python's ast first (docstrings and bare string
statements dropped, then printed back by ast.unparse), so comments, docstrings and
formatting do not count; anything that changes what the code does does. The git commit
cannot say this: it misses a plugin outside the repository and untracked files.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path

from tpo_bench.contract.io import REPO_ROOT

PROJECT = ("tpo_bench.algorithms", "tpo_bench.tasks", "tpo_bench.contract")
_cache: dict[tuple, tuple[str, tuple[str, ...]]] = {}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                            and isinstance(s.value.value, str))]
            node.body = kept or [ast.Pass()]
    return tree


def _origin(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The project modules `module`'s code imports (`from pkg import name` counts
    pkg.name where that is a module)."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else node.module
            if not base:
                continue
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    inside = tuple(f"{p}." for p in PROJECT)
    return {m for m in out if (m in PROJECT or m.startswith(inside)) and _origin(m) is not None}


def _file(module: str, path: Path) -> tuple[str, tuple[str, ...]]:
    """(normalised source's sha256, project modules it imports), cached by file state."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _cache:
        tree = ast.parse(path.read_text(), filename=str(path))
        deps = tuple(sorted(_imports(tree, module, path.name == "__init__.py")))
        normal = ast.unparse(_strip_docstrings(tree))
        _cache[key] = (hashlib.sha256(normal.encode()).hexdigest(), deps)
    return _cache[key]


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:  # a plugin outside the repository
        return str(path.resolve())


def code_fingerprint(*classes: type) -> tuple[str, list[str]]:
    """(16 hex digits, the files fingerprinted) for the code behind `classes`."""
    todo, seen, parts = [c.__module__ for c in classes], set(), []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _origin(module)
        if path is None:
            continue
        digest, deps = _file(module, path)
        parts.append((_shown(path), digest))
        todo.extend(deps)
    parts.sort()
    whole = hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in parts).encode())
    return whole.hexdigest()[:16], [name for name, _ in parts]
