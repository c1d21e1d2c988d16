"""The rooms import each other relatively, so that a reader's static tools (an import graph,
an IDE's go-to) follow every import inside the checkout without resolving `tpo_bench/`'s
links; run by path or by a top-level name, a module names its package first."""
import ast

import pytest

from conftest import REPO

ROOMS = ("bench", "tasks", "algorithms", "contract", "analysis", "tools", "conf", "integrations")


def _modules():
    return sorted(f for room in ROOMS for f in (REPO / room).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_room_names_the_harness_relatively(path):
    tree = ast.parse(path.read_text())
    absolute = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level
                and (n.module or "").startswith("tpo_bench.")]
    absolute += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names if a.name.startswith("tpo_bench.") and not _in_shim(path, n.lineno)]
    assert not absolute, f"{path.relative_to(REPO)}: lines {absolute} import tpo_bench.<room> absolutely"


def _in_shim(path, lineno):
    line = path.read_text().splitlines()[lineno - 1]
    return "run by path or by a top-level name" in line


@pytest.mark.parametrize("path", [p for p in _modules() if '__name__ == "__main__"' in p.read_text()
                                  or p.name == "__main__.py"], ids=lambda p: str(p.relative_to(REPO)))
def test_a_runnable_module_names_its_package_before_its_relative_imports(path):
    text = path.read_text()
    tree = ast.parse(text)
    if not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree)):
        return
    shim = next((i for i, l in enumerate(text.splitlines(), 1) if "run by path or by a top-level name" in l), None)
    assert shim is not None, f"{path.relative_to(REPO)} runs as a script but sets no __package__"
    first = min(n.lineno for n in tree.body if isinstance(n, ast.ImportFrom) and n.level) \
        if any(isinstance(n, ast.ImportFrom) and n.level for n in tree.body) else shim + 1
    assert shim < first
    lines = text.splitlines()
    pkg = ".".join(["tpo_bench", *path.relative_to(REPO).parent.parts])
    assert lines[shim - 2] == 'if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):'
    assert lines[shim - 1].strip().startswith(f"import {pkg} ") and lines[shim].strip() == f'__package__ = "{pkg}"'
