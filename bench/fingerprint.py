"""The code a run used, as one short hash (summary.json's `code_fingerprint`).

Over the transitive closure of the imports (read from each file's import statements) that
start at the algorithm's and the task's modules, at HARNESS and at every module that
`algorithms` or `tasks` imports without shipping it (a module dropped into their folders,
tracked or not: it runs in every run), within the harness (`tpo_bench.algorithms`,
`.tasks`, `.contract`, `.bench`) and within a plugin's own package (its top-level package,
or the folder of a top-level plugin module). Not covered: site-packages and dist-packages,
analysis/, tools/ and dev/, other modules imported by name at run time, data files. Each file
is normalised through Python's ast (docstrings dropped, printed back by ast.unparse), so
comments, docstrings and formatting do not count. The git commit cannot say this: it
misses a plugin outside the repository and untracked files. `harness=False` gives the
narrower fingerprint of runs recorded before `code_scope` (the class modules and their
imports from algorithms, tasks and contract only).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path

from ..contract.io import REPO_ROOT
from ..contract.registry import public_modules

PROJECT = ("tpo_bench.algorithms", "tpo_bench.tasks", "tpo_bench.contract")
HARNESS_PACKAGES = (*PROJECT, "tpo_bench.bench")
# What a run executes besides its algorithm and task; their imports bring the rest.
HARNESS = ("tpo_bench.bench.runner", "tpo_bench.bench.engine")
# The packages that import every public module in their folders (each registers itself)
# and name the ones the harness ships (SHIPPED).
REGISTERING = ("tpo_bench.algorithms", "tpo_bench.tasks")
# summary.json's `code_scope`: what the fingerprint covers (absent: the narrower one).
SCOPE = 2
_INSTALLED = ("site-packages", "dist-packages")
_cache: dict[tuple, tuple[str, tuple[str, ...]]] = {}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                            and isinstance(s.value.value, str))]
            node.body = kept or [ast.Pass()]
    return tree


def origin(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name `module`'s code imports (`from pkg import name` counts pkg.name
    too, where that is a module), relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                    if node.level else node.module
            except ImportError:  # a relative import past the top
                continue
            if not base:
                continue
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _installed(path: Path) -> bool:
    return any(part in _INSTALLED for part in path.parts)


def _homes(classes: tuple[type, ...]) -> list[Path]:
    """The folders of the plugins' own code: a class's top-level package outside the
    harness (or the folder of a top-level plugin module), never an installed one."""
    out = []
    for cls in classes:
        module = cls.__module__
        if module.startswith("tpo_bench."):
            continue
        top = module.split(".")[0]
        path = origin(top)
        if path is None or _installed(path):
            continue
        out.append(path.parent if path.name == "__init__.py" or top != module else path.parent)
    return out


def _followed(module: str, packages: tuple[str, ...], homes: list[Path]) -> bool:
    if module.startswith("tpo_bench."):
        return module in packages or module.startswith(tuple(f"{p}." for p in packages))
    if not homes:
        return False
    top = origin(module.split(".")[0])  # a top-level lookup imports nothing
    if top is None or _installed(top):
        return False
    return any(top.is_relative_to(h) for h in homes)


def strays() -> list[str]:
    """The modules REGISTERING imports that the harness does not ship: each runs in every
    run (an import may patch anything), so each roots every run's fingerprint."""
    out = []
    for name in REGISTERING:
        package = importlib.import_module(name)
        out += [m for m in public_modules(name, package.__path__)
                if m.rpartition(".")[2] not in package.SHIPPED]
    return out


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


def code_fingerprint(*classes: type, harness: bool = True) -> tuple[str, list[str]]:
    """(16 hex digits, the files fingerprinted) for the code behind `classes` and, with
    `harness`, the harness a run executes and the plugins' own packages (module doc)."""
    packages = HARNESS_PACKAGES if harness else PROJECT
    homes = _homes(classes) if harness else []
    todo = [c.__module__ for c in classes] + ([*HARNESS, *strays()] if harness else [])
    seen, parts = set(), []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = origin(module)
        if path is None:
            continue
        digest, deps = _file(module, path)
        parts.append((_shown(path), digest))
        todo.extend(m for m in deps if m not in seen and _followed(m, packages, homes)
                    and origin(m) is not None)
    parts.sort()
    whole = hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in parts).encode())
    return whole.hexdigest()[:16], [name for name, _ in parts]
