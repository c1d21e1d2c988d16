"""analysis/ in rooms: the import graph of its modules, read with `ast`
(every import, at the top or inside a function), has no cycle; the generic modules do not
reach into the paper's or the tuning's rooms (plot's --figure aside); and no module uses
another module's underscore names."""
import ast
from pathlib import Path

from conftest import REPO

GENERIC = {"analysis.collect", "analysis.stats", "analysis.configs", "analysis.style",
           "analysis.labels", "analysis.plot"}
# plot --figure NAME draws the paper's figures (--page, their comparison page): the one way
# from the generic room out.
ALLOWED_OUT = {("analysis.plot", "analysis.paper.figures"), ("analysis.plot", "analysis.paper.paper_figures"),
               ("analysis.plot", "analysis.paper.page")}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / "analysis").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(path: Path, known: set) -> dict[str, str]:
    """Local name -> analysis module, for every import of an analysis module in the file."""
    names = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    names[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in known:  # from analysis.paper import figures
                    names[a.asname or a.name] = full
                elif node.module in known:  # from analysis.style import fmt
                    names.setdefault(f"<{node.module}>", node.module)
    return names


def graph() -> dict[str, set]:
    mods = modules()
    return {m: set(imports(p, set(mods)).values()) - {m} for m, p in mods.items()}


def test_no_import_cycle_in_analysis():
    g = graph()
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(n):] + [n]))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_the_generic_modules_stay_out_of_the_paper_and_tuning_rooms():
    g = graph()
    out = {(m, n) for m in GENERIC for n in g[m]
           if n.startswith(("analysis.paper", "analysis.tuning"))}
    assert out <= ALLOWED_OUT, sorted(out - ALLOWED_OUT)
    # tuning is a room of its own: the paper's report reads it, it does not read the paper
    assert not any(n.startswith("analysis.paper") for m in g if m.startswith("analysis.tuning")
                   for n in g[m])


def test_no_module_uses_another_modules_private_names():
    known = set(modules())
    files = [*modules().values(), *sorted((REPO / "reproduction").glob("*.py"))]
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        local = imports(path, known)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name) \
                    and node.value.id in local:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("analysis"):
                found += [f"{path.relative_to(REPO)}:{node.lineno} from {node.module} import {a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not found, found
