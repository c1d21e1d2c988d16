"""The house's rooms and floors, read from the source with `ast` (every import, at the top
or inside a function, so a lazy import cannot hide an arrow): the harness imports itself
only as tpo_bench.<room>; the contract imports none of the rest; tasks and algorithms never
import each other nor the runner; analysis reads the records through the contract alone
(and conf/ through bench.config); the tools may import any room and dev/ (the project's
maintenance) anything, and only the tests and dev/ import those two; no import cycle.
Inside analysis/: no cycle, the generic modules stay out of the paper's and the tuning's
rooms. Nowhere (tests and tools included) does a module use another's underscore names.
The runner, and analysis through the registry's tables, read no task or algorithm member
that contract.batch does not declare. Each file is one module object (a top-level name is
its tpo_bench module), and a static tool reading the imports file by file finds every
arrow between the rooms."""
import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

from conftest import REPO

PACKAGES = ("contract", "bench", "tasks", "algorithms", "analysis", "hydra_plugins", "tools",
            "integrations", "dev")
NAMESPACE = "tpo_bench"  # every harness package is imported as tpo_bench.<package>
HARNESS = ("contract", "bench", "tasks", "algorithms", "analysis", "tools", "conf", "integrations")
# package -> the project packages it may import (itself always); none but tools and dev may
# import tools, none but dev may import dev (the checkout's maintenance, not installed), and
# the tests may import any
MAY_IMPORT = {
    "contract": set(),
    "tasks": {"contract"},
    "algorithms": {"contract"},
    "bench": {"contract", "tasks", "algorithms", "hydra_plugins"},  # __main__ registers the sweepers
    "hydra_plugins": {"contract", "bench"},
    "analysis": {"contract"},  # a preset's dataclass through contract.registry's tables
    # other trainers' hooks: rows -> Batch -> a registered algorithm's loss, curves -> run dirs
    "integrations": {"contract", "algorithms"},
    "tools": set(PACKAGES) - {"dev"},
    "dev": set(PACKAGES),
}
# Arrows a floor may draw beyond MAY_IMPORT, each to one module: analysis reads conf/'s
# presets as a run composes them (the one reader of conf/).
ALSO_MAY_IMPORT = {("analysis.configs", "bench.config")}
ANALYSIS_GENERIC = {"analysis.collect", "analysis.stats", "analysis.configs", "analysis.style",
                    "analysis.labels", "analysis.plot", "analysis.rekey"}
# plot --figure NAME draws the paper's figures (--page, their comparison page): the one way
# from the generic room out.
ANALYSIS_ALLOWED_OUT = {("analysis.plot", "analysis.paper.figures"),
                        ("analysis.plot", "analysis.paper.paper_figures"),
                        ("analysis.plot", "analysis.paper.page")}


@functools.lru_cache(maxsize=None)
def walked(source: str) -> tuple[ast.AST, ...]:
    """Every node of a source's syntax tree, in ast.walk's order: each file is parsed and
    walked once for all the rules below (keyed by the text, so a changed file is read anew)."""
    return tuple(ast.walk(ast.parse(source)))


def nodes(path: Path) -> tuple[ast.AST, ...]:
    return walked(path.read_text())


def modules(packages=PACKAGES) -> dict[str, Path]:
    out = {}
    for pkg in packages:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def room_name(module: str) -> str:
    """tpo_bench.bench.runner -> bench.runner: the harness imports itself under tpo_bench."""
    return module.removeprefix(f"{NAMESPACE}.")


def imports(path: Path, known: set[str]) -> dict[str, str]:
    """Local name -> project module (its room name), for every import of a project module in
    the file (a `from pkg import name` counts pkg.name when that is a module, else pkg)."""
    names = {}
    for node in nodes(path):
        if isinstance(node, ast.Import):
            for a in node.names:
                if room_name(a.name) in known:
                    names[a.asname or a.name] = room_name(a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module and node.level == 0 or node.level):
            module = room_name(node.module) if not node.level else absolute(path, node)
            for a in node.names:
                full = f"{module}.{a.name}"
                if full in known:  # from tpo_bench.analysis.paper import figures
                    names[a.asname or a.name] = full
                elif module in known:  # from tpo_bench.analysis.style import fmt
                    names.setdefault(f"<{module}>", module)
    return names


def absolute(path: Path, node: ast.ImportFrom) -> str:
    """A relative import's module as its room name: `from ..contract import io` in
    bench/runner.py -> contract."""
    parts = list(path.relative_to(REPO).parent.parts)
    parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
    return ".".join(parts + ([node.module] if node.module else []))


def bare_imports(path: Path) -> list[str]:
    """Imports of a harness package by its top-level name (`tasks`, not `tpo_bench.tasks`):
    a project's own package of that name would be imported instead."""
    found = []
    for node in nodes(path):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
        found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names
                  if n.split(".")[0] in HARNESS]
    return found


def graph(packages=PACKAGES) -> dict[str, set[str]]:
    mods = modules(packages)
    return {m: set(imports(p, set(mods)).values()) - {m} for m, p in mods.items()}


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(m, path):
        state[m] = 1
        for t in sorted(g.get(m, ())):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (found := visit(t, path + [t])):
                return found
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m, [m])):
            return found
    return None


@pytest.mark.parametrize("pkg", sorted(MAY_IMPORT))
def test_each_floor_imports_only_the_floors_below(pkg):
    wrong = sorted((m, t) for m, targets in graph().items() if m.split(".")[0] == pkg
                   for t in targets if t.split(".")[0] not in MAY_IMPORT[pkg] | {pkg}
                   and (m, t) not in ALSO_MAY_IMPORT)
    assert not wrong, f"{pkg} reaches up: {wrong}"


ROOM_STRING = re.compile(rf"{NAMESPACE}\.(\w+)[\w.]*")


def string_reaches(packages=PACKAGES) -> list[str]:
    """Where a module names, in a string (importlib.import_module, a registry, an f-string's
    fixed part), a module of a room its floor may not import."""
    found = []
    for module, path in modules(packages).items():
        pkg = module.split(".")[0]
        for node in nodes(path):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and (m := ROOM_STRING.fullmatch(node.value)) and m.group(1) in PACKAGES \
                    and m.group(1) not in MAY_IMPORT[pkg] | {pkg}:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}")
    return found


def test_no_floor_reaches_up_by_a_string():
    """The contract names no task or algorithm package (its tables are filled from below,
    through the tpo_bench.plugins entry points), analysis no task, and so on."""
    assert not string_reaches(), string_reaches()


def test_the_tables_are_filled_from_below():
    """The harness's tasks and algorithms are advertised as tpo_bench.plugins (pyproject.toml),
    and each package imports its own modules: a lookup finds every one."""
    import sys

    from tpo_bench.contract.registry import ALGORITHMS, TASKS, advertised

    assert {"tpo_bench.tasks", "tpo_bench.algorithms"} <= set(advertised())
    assert {"tabular_multi", "mnist"} <= set(TASKS.names())
    assert {"tpo", "grpo", "dg"} <= set(ALGORITHMS.names())
    own = [m for m in modules(("tasks", "algorithms")) if "." in m and not m.split(".")[-1].startswith("_")]
    assert len(own) >= 10 and not [m for m in own if f"{NAMESPACE}.{m}" not in sys.modules]



@pytest.mark.slow  # starts processes
def test_a_broken_installed_plugin_is_named_and_the_rest_runs(tmp_path):
    """An installed package whose tpo_bench.plugins entry point raises on import: every
    command still runs (help, a run), and stderr names the plugin once, with the remedy;
    a run that asks for one of its names is told it did not import."""
    from conftest import TINY, run_bench

    info = tmp_path / "their_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tpo_bench.plugins]\ntheirs = their_losses\n")
    (tmp_path / "their_losses.py").write_text("raise RuntimeError('their bug')\n")
    env = {"PYTHONPATH": str(tmp_path)}
    help_ = run_bench("--help", env=env)
    assert "algo:" in help_.stdout
    run = run_bench(*TINY, f"output_root={tmp_path / 'out'}", env=env)
    for proc in (help_, run):
        said = [line for line in proc.stderr.splitlines() if "their_losses" in line]
        assert len(said) == 1, proc.stderr
        assert "'theirs'" in said[0] and "RuntimeError: their bug" in said[0]
        assert "`pip uninstall their-plugin` disables it" in said[0] and "Traceback" not in proc.stderr
    asked = run_bench(*TINY, "algo=tpo", "algo.impl=their_tpo", f"output_root={tmp_path / 'out2'}",
                      env=env, check=False)
    assert asked.returncode == 2 and "unknown algorithm 'their_tpo'" in asked.stderr
    assert "the plugin 'theirs' (their_losses, a tpo_bench.plugins entry point of the package " \
           "their-plugin) failed to import (said above)" in asked.stderr


def test_the_harness_own_advertised_packages_still_raise(monkeypatch):
    """Only an outside plugin is left out with a warning: a harness package that fails to
    import is the harness's own error, and raises with its traceback."""
    from tpo_bench.contract import registry

    monkeypatch.setattr(registry, "advertised", lambda: ("tpo_bench.no_such_room",))
    with pytest.raises(ModuleNotFoundError, match="no_such_room"):
        registry.load_plugins()
    assert "tpo_bench.no_such_room" not in registry.BROKEN

def test_the_string_rule_sees_an_import_by_name(tmp_path, monkeypatch):
    for pkg in ("contract", "analysis"):
        (tmp_path / pkg).mkdir()
    (tmp_path / "contract" / "r.py").write_text(
        "import importlib\nimportlib.import_module('tpo_bench.tasks')\n")
    (tmp_path / "analysis" / "a.py").write_text(
        "import importlib\ndef f(n):\n    return importlib.import_module(f'tpo_bench.algorithms.{n}')\n"
        "OK = 'tpo_bench.contract.registry'\n")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    assert sorted(hit.split(" ")[1] for hit in string_reaches(("contract", "analysis"))) == \
        ["'tpo_bench.algorithms.'", "'tpo_bench.tasks'"]


def test_no_import_cycle():
    assert cycle(graph()) is None, cycle(graph())


def test_the_harness_imports_itself_only_under_its_namespace():
    """No module of the harness, its tests or the docs' build imports `tasks`, `bench`, ...
    by the top-level name: from a project that has its own, that would be the project's."""
    files = [*modules().values(), *sorted((REPO / "tests").glob("*.py")),
             *sorted((REPO / "docs").rglob("*.py")), *sorted((REPO / "tpo_bench").rglob("*.py"))]
    found = [hit for path in files for hit in bare_imports(path)]
    assert len(files) > 100 and not found, found


def test_the_checker_sees_an_arrow_and_a_cycle(tmp_path, monkeypatch):
    """The rules can fail: a task importing an algorithm, analysis importing a tool, and two
    modules importing each other, are all caught."""
    for pkg in ("tasks", "algorithms", "analysis", "tools"):
        (tmp_path / pkg).mkdir()
    (tmp_path / "tasks" / "t.py").write_text("from tpo_bench.algorithms import a\n")
    (tmp_path / "algorithms" / "a.py").write_text("def f():\n    import tpo_bench.tasks.t\n")
    (tmp_path / "analysis" / "c.py").write_text("from tpo_bench.tools.m import x\n")
    (tmp_path / "tools" / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    with pytest.raises(AssertionError, match="tasks reaches up"):
        test_each_floor_imports_only_the_floors_below("tasks")
    with pytest.raises(AssertionError, match="analysis reaches up.*tools.m"):
        test_each_floor_imports_only_the_floors_below("analysis")
    with pytest.raises(AssertionError, match="tasks.t"):
        test_no_import_cycle()


# ---------------------------------------------------------------- inside analysis/

def test_no_import_cycle_in_analysis():
    found = cycle(graph(("analysis",)))
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_the_generic_modules_stay_out_of_the_paper_and_tuning_rooms():
    g = graph(("analysis",))
    out = {(m, n) for m in ANALYSIS_GENERIC for n in g[m]
           if n.startswith(("analysis.paper", "analysis.tuning"))}
    assert out <= ANALYSIS_ALLOWED_OUT, sorted(out - ANALYSIS_ALLOWED_OUT)
    # tuning is a room of its own: the paper's report reads it, it does not read the paper
    assert not any(n.startswith("analysis.paper") for m in g if m.startswith("analysis.tuning")
                   for n in g[m])


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path, module: str, known: set[str]) -> list[str]:
    """Where the file reaches into another project module's underscore names: `mod._name`,
    `from mod import _name` (a name, not a private module of the package) and
    `setattr(mod, "_name", ...)` (monkeypatch.setattr included)."""
    found, where = [], path.relative_to(REPO)
    local = {n: m for n, m in imports(path, known).items() if m != module}
    for node in nodes(path):
        if isinstance(node, ast.Attribute) and private(node.attr) \
                and isinstance(node.value, ast.Name) and node.value.id in local:
            found.append(f"{where}:{node.lineno} {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and room_name(node.module) in known and room_name(node.module) != module:
            found += [f"{where}:{node.lineno} from {node.module} import {a.name}"
                      for a in node.names
                      if private(a.name) and f"{room_name(node.module)}.{a.name}" not in known]
        elif isinstance(node, ast.Call) and len(node.args) >= 2 \
                and ast.unparse(node.func).split(".")[-1] in ("setattr", "getattr", "hasattr", "delattr") \
                and isinstance(node.args[0], ast.Name) and node.args[0].id in local \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                and private(node.args[1].value):
            found.append(f"{where}:{node.lineno} {ast.unparse(node.func)}({node.args[0].id}, "
                         f"{node.args[1].value!r})")
    return found


def every_python_file() -> dict[str, Path]:
    """Every module of the project, its tests, tools, entry package and docs' build."""
    files = dict(modules())
    for folder in ("tests", "tpo_bench", "docs"):
        for path in sorted((REPO / folder).rglob("*.py")):
            files[".".join(path.relative_to(REPO).with_suffix("").parts)] = path
    return files


def test_no_module_uses_another_modules_private_names():
    """Everywhere (the packages, tools, tests, tpo_bench, docs): no module uses an underscore
    name of another: a name that another module needs is public."""
    known = set(modules())
    files = every_python_file()
    found = [hit for module, path in files.items() for hit in private_uses(path, module, known)]
    assert len(files) > 140 and not found, found


def test_the_private_name_rule_catches_each_form(tmp_path, monkeypatch):
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench" / "runner.py").write_text("def _step():\n    pass\n_CACHE = {}\n")
    (tmp_path / "bench" / "own.py").write_text("def _mine():\n    pass\n_mine()\n")
    forms = ["from tpo_bench.bench.runner import _step",
             "from tpo_bench.bench import runner\nrunner._CACHE.clear()",
             "import tpo_bench.bench.runner as r\nr._step()",
             "from tpo_bench.bench import runner\n"
             "def test_x(monkeypatch):\n    monkeypatch.setattr(runner, '_step', None)"]
    for i, form in enumerate(forms):
        (tmp_path / "tests" / f"test_{i}.py").write_text(form + "\n")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    known = set(modules(("bench",)))
    assert known == {"bench.runner", "bench.own"}
    hits = {m: private_uses(p, m, known) for m, p in every_python_file().items()}
    assert hits["bench.own"] == [] and hits["bench.runner"] == []
    assert [len(hits[f"tests.test_{i}"]) for i in range(len(forms))] == [1, 1, 1, 1], hits


# ---------------------------------------------------------------- the runner and the contract

OWNER = re.compile(r"(?:^|\.|_)(task|algo)$")  # task, run_task, spec.task, algo, ...


def probed_members(paths=None) -> list[tuple[str, str, str]]:
    """(where, "task" or "algo", member) for every getattr/hasattr in bench/ on an
    expression named task, run_task or algo (spec.task included)."""
    out = []
    for path in paths or sorted((REPO / "bench").glob("*.py")):
        for node in nodes(path):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
                m = OWNER.search(ast.unparse(node.args[0]))
                if m:
                    member = node.args[1].value if isinstance(node.args[1], ast.Constant) else "?"
                    out.append((f"{path.name}:{node.lineno}", m.group(1), member))
    return out


def read_members(paths=None) -> list[tuple[str, str, str]]:
    """(where, "task" or "algo", member) for every attribute bench/ reads off such an
    expression (`task.eval_every`, `spec.algo.level`)."""
    out = []
    for path in paths or sorted((REPO / "bench").glob("*.py")):
        for node in nodes(path):
            if isinstance(node, ast.Attribute) and (m := OWNER.search(ast.unparse(node.value))):
                out.append((f"{path.name}:{node.lineno}", m.group(1), node.attr))
    return out


def declared(*classes) -> set[str]:
    return {n for c in classes for n in (*getattr(c, "__annotations__", {}), *vars(c))
            if not n.startswith("_")}


def allowed_members() -> dict[str, set[str]]:
    from tpo_bench.contract.batch import Algorithm, AlgorithmOptions, Task, TaskOptions

    return {"task": declared(Task, TaskOptions), "algo": declared(Algorithm, AlgorithmOptions)}


def test_the_runner_probes_no_member_of_a_task_or_an_algorithm():
    """Every optional member is declared once, with its default, in contract.batch's
    TaskOptions / AlgorithmOptions, and bench/ reads it directly: no getattr or hasattr
    with a default of its own."""
    assert not probed_members(), probed_members()


def test_the_contract_declares_every_member_the_runner_reads():
    allowed = allowed_members()
    reads = read_members()
    assert len(reads) >= 30, reads  # the reader finds them
    undeclared = sorted(r for r in reads if r[2] not in allowed[r[1]])
    assert not undeclared, f"read but not declared in contract.batch: {undeclared}"


def test_every_optional_member_has_its_default(tmp_path):
    """Each member the options declare has a value on the class (a default, not only an
    annotation), and the checkers above see a probe and an undeclared read."""
    from tpo_bench.contract.batch import AlgorithmOptions, TaskOptions

    for options in (TaskOptions, AlgorithmOptions):
        missing = [n for n in declared(options) if not hasattr(options, n)]
        assert not missing, (options.__name__, missing)
    src = tmp_path / "probe.py"
    src.write_text("def f(task, spec):\n    return getattr(task, 'eval_every', 0), spec.algo.surprise\n")
    assert probed_members([src]) == [("probe.py:2", "task", "eval_every")]
    assert [r for r in read_members([src]) if r[2] not in allowed_members()[r[1]]] == \
        [("probe.py:2", "algo", "surprise")]


TABLE = re.compile(r"\b(TASKS|ALGORITHMS)\b.*\.get$")  # TASKS.get, registry.TASKS.get


def table_lookup(node: ast.AST) -> str | None:
    """"task" or "algo" where `node` is a lookup in a registry table (`TASKS.get(name)`), or
    an instance of what one returns (`TASKS.get(name)(...)`); else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
        node = node.func
    if isinstance(node, ast.Call) and (m := TABLE.search(ast.unparse(node.func))):
        return "task" if m.group(1) == "TASKS" else "algo"
    return None


def table_reads(paths=None) -> list[tuple[str, str, str]]:
    """(where, "task" or "algo", member) for every attribute read off a registry lookup, or
    off a name bound to one, in the rooms that reach tasks and algorithms through the
    contract's tables alone (analysis, the sweepers, the other trainers' hooks)."""
    out = []
    for path in paths or [p for m, p in modules(("analysis", "hydra_plugins", "integrations")).items()]:
        bound = {t.id: kind for node in nodes(path) if isinstance(node, ast.Assign)
                 and (kind := table_lookup(node.value)) for t in node.targets if isinstance(t, ast.Name)}
        for node in nodes(path):
            if not isinstance(node, ast.Attribute):
                continue
            kind = table_lookup(node.value) or \
                (bound.get(node.value.id) if isinstance(node.value, ast.Name) else None)
            if kind:
                out.append((f"{path.name}:{node.lineno}", kind, node.attr))
    return out


def test_a_reader_of_the_tables_uses_only_what_the_contract_declares(tmp_path):
    """analysis finds a task's or an algorithm's class in contract.registry's tables; what it
    reads off one (a member or a method) is declared in contract.batch, so every task may be
    asked for it and one without it has the declared default. The checker sees each form."""
    allowed = allowed_members()
    allowed = {k: v | {"registered_name"} for k, v in allowed.items()}  # the registry sets it
    assert ("report.py", "task", "analytic_weight") in {(w.split(":")[0], k, m) for w, k, m in table_reads()}
    undeclared = sorted(r for r in table_reads() if r[2] not in allowed[r[1]])
    assert not undeclared, f"read off a registry lookup but not declared in contract.batch: {undeclared}"
    src = tmp_path / "reader.py"
    src.write_text("from tpo_bench.contract.registry import ALGORITHMS, TASKS\n"
                   "def f(name):\n    cls = TASKS.get(name)\n    return (cls.surprise, cls.eval_every,\n"
                   "        TASKS.get(name).odd(1), ALGORITHMS.get(name)().level, ALGORITHMS.get(name)().oops)\n")
    assert sorted(r for r in table_reads([src]) if r[2] not in allowed[r[1]]) == \
        [("reader.py:4", "task", "surprise"), ("reader.py:5", "algo", "oops"), ("reader.py:5", "task", "odd")]


def test_a_plugin_without_the_options_base_gets_their_defaults():
    """A registered class that does not subclass the options is given the defaults it
    lacks, its own members kept; a default is no dataclass field (no config, no hash)."""
    import dataclasses

    from tpo_bench.contract.batch import AlgorithmOptions, TaskOptions
    from tpo_bench.contract.registry import Registry

    reg = Registry("task", TaskOptions)

    @reg.register("plain")
    @dataclasses.dataclass(frozen=True)
    class Plain:
        name: str = "plain"
        eval_every: int = 5

    task = Plain()
    assert task.eval_every == 5 and task.kl_ref == 0.0 and task.micro_batch == 0
    assert task.rollout_seeds is None and task.grad_metrics(None) == {}
    assert [f.name for f in dataclasses.fields(Plain)] == ["name", "eval_every"]
    from tpo_bench.algorithms.grpo import GRPO
    assert "dynamic_sampling" not in {f.name for f in dataclasses.fields(GRPO)}
    assert GRPO().dynamic_sampling == 0 and isinstance(GRPO(), AlgorithmOptions)


# ---------------------------------------------------------------- one module per file

ROOMS_WITH_CODE = ("bench", "tasks", "algorithms", "contract", "analysis", "tools", "integrations")


def resolve_to_file(module: str) -> Path | None:
    """The file a static tool finds for `module` from the repository root alone (no import
    run, links followed): `a/b.py` or `a/b/__init__.py`."""
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def static_room_arrows(packages=PACKAGES) -> set[tuple[str, str]]:
    """(room, room) for every import in the packages' files that resolves to a file of
    another room, each import resolved by the file system only."""
    arrows = set()
    for path in modules(packages).values():
        room = path.relative_to(REPO).parts[0]
        for node in nodes(path):
            base = ""
            if isinstance(node, ast.ImportFrom) and node.level:  # relative: from the file's folder
                folder = path.parent.resolve()
                for _ in range(node.level - 1):
                    folder = folder.parent
                base = ".".join(folder.relative_to(REPO).parts)
            head = ".".join(filter(None, [base, getattr(node, "module", None) or ""]))
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{head}.{a.name}" if head else a.name for a in node.names] + ([head] if head else []) \
                if isinstance(node, ast.ImportFrom) and (node.module or node.level) else []
            for name in names:
                if (target := resolve_to_file(name)) is not None and target.is_relative_to(REPO):
                    arrows.add((room, target.relative_to(REPO).parts[0]))
                    break  # `from a.b import c`: the module c, else a.b
    return {(a, b) for a, b in arrows if a != b and b in PACKAGES}  # not tpo_bench's alias


def test_static_resolution_finds_every_arrow_between_rooms():
    """`tpo_bench.contract.batch` is a file a static tool finds (tpo_bench/contract links to
    contract/): the arrows read that way are the layering rule's arrows, all of them."""
    by_name = {(m.split(".")[0], t.split(".")[0]) for m, ts in graph().items() for t in ts}
    by_name = {(a, b) for a, b in by_name if a != b}
    static = static_room_arrows()
    assert {("analysis", "contract"), ("bench", "tasks"), ("bench", "algorithms"),
            ("tasks", "contract"), ("integrations", "algorithms")} <= static, sorted(static)
    assert static == by_name, (sorted(by_name - static), sorted(static - by_name))


@pytest.mark.parametrize("room", ROOMS_WITH_CODE)
def test_a_top_level_name_is_its_tpo_bench_module(room, monkeypatch):
    """`import bench` from a checkout's root (python -m bench) gives the module
    tpo_bench.bench itself, its submodules too: one object per file, one registry."""
    import importlib
    import sys

    monkeypatch.syspath_prepend(str(REPO))
    both = [importlib.import_module(name) for name in (room, f"tpo_bench.{room}")]
    assert both[0] is both[1]
    for name in ("contract.registry", "bench.runner", "tasks.tabular", "analysis.collect"):
        assert importlib.import_module(name) is importlib.import_module(f"tpo_bench.{name}")
    registry = importlib.import_module("contract.registry")
    assert registry.TASKS is importlib.import_module("tpo_bench.contract.registry").TASKS
    files: dict[Path, set[int]] = {}
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] not in (NAMESPACE, *HARNESS):
            continue  # a module a test loaded from its path under a name of its own
        where = getattr(mod, "__file__", None)
        if where and Path(where).resolve().is_relative_to(REPO):
            files.setdefault(Path(where).resolve(), set()).add(id(mod))
    twice = sorted(str(f.relative_to(REPO)) for f, ids in files.items() if len(ids) > 1)
    assert not twice, f"loaded as two module objects: {twice}"


def test_a_projects_own_package_of_a_rooms_name_is_left_alone(monkeypatch):
    """The alias covers only a name already handed over: a project's own `tasks` package
    keeps its own submodules."""
    import sys
    import types

    from tpo_bench import Alias

    monkeypatch.setitem(sys.modules, "tasks", types.ModuleType("tasks"))
    assert Alias().find_spec("tasks.tabular") is None
    import tpo_bench.tasks
    monkeypatch.setitem(sys.modules, "tasks", tpo_bench.tasks)
    assert Alias().find_spec("tasks.tabular").origin == \
        str(Path(tpo_bench.tasks.__file__).parent / "tabular.py")


@pytest.mark.slow  # git in a subprocess
def test_the_registering_packages_name_the_modules_they_ship():
    """SHIPPED is what bench.fingerprint tells a dropped-in module by: it must list every
    public module the repository tracks in algorithms/ and tasks/, and nothing else."""
    import subprocess

    from tpo_bench.bench import fingerprint

    for name in fingerprint.REGISTERING:
        package = importlib.import_module(name)
        folder = name.rpartition(".")[2]
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", f"{folder}/*.py"],
                                capture_output=True, text=True)
        if listed.returncode != 0 or not listed.stdout:
            pytest.skip("not a git checkout")
        tracked = {Path(f).stem for f in listed.stdout.split() if "/" not in f[len(folder) + 1:]
                   and not Path(f).name.startswith("_")}
        assert set(package.SHIPPED) == tracked, name


def test_the_output_folder_is_named_once():
    """Where runs and what is made from them land by default: contract.schema.OUTPUT_ROOT,
    the one literal in the installed rooms (dev/'s own scratch folders aside)."""
    from tpo_bench.contract import schema

    found = [(p.relative_to(REPO).as_posix(), n.lineno)
             for pkg in PACKAGES if pkg != "dev" for p in sorted((REPO / pkg).rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.split("/")[0] == schema.OUTPUT_ROOT]
    assert found == [("contract/schema.py", found[0][1])], found
