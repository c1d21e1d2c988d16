"""`tpo-bench COMMAND`: the one command-line entry covers the runner, the analysis scripts
and every user tool, and runs each as `python -m` would. The project's own maintenance
(dev/) is neither a command nor installed, and each of its scripts runs from a checkout."""
import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import REPO, TINY, run_dirs, summary
from tpo_bench import cli


def has_main_guard(path: Path) -> bool:
    return any(isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
               for node in ast.parse(path.read_text()).body)


def test_the_script_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"tpo-bench": "tpo_bench.cli:main"}


def test_every_tool_and_analysis_entry_has_a_command():
    entries = {"tpo_bench." + ".".join(p.relative_to(REPO).with_suffix("").parts)
               for folder in ("tools", "analysis") for p in sorted((REPO / folder).rglob("*.py"))
               if has_main_guard(p)}
    commands = {module for module, _ in cli.COMMANDS.values()}
    assert len(entries) >= 12 and entries <= commands, sorted(entries - commands)
    assert "tpo_bench.bench" in commands


def test_each_tool_is_a_command_under_its_module_name():
    """The README: each tool `python -m tools.<name>` is `tpo-bench <name>`."""
    tools = sorted(p.stem for p in (REPO / "tools").glob("*.py") if has_main_guard(p))
    assert len(tools) >= 5
    for stem in tools:
        name = cli.lookup(stem)
        assert name is not None and cli.COMMANDS[name][0] == f"tpo_bench.tools.{stem}", stem
    assert cli.lookup("llm_nope") is None


DEV = REPO / "dev"


def test_the_maintenance_is_no_command_and_not_installed():
    """dev/__init__'s table lists the maintenance scripts, each in dev/ and none in tools/;
    no command runs one (each command's module is a file of a package pyproject.toml
    installs), and pyproject.toml installs nothing from dev/."""
    import importlib.util

    import tpo_bench

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    installed = {p: setuptools["package-dir"].get(p, p.replace(".", "/")) for p in setuptools["packages"]}
    rooms = {(REPO / folder).resolve() for folder in installed.values()}
    scripts = sorted(p.stem for p in DEV.glob("*.py") if has_main_guard(p))
    listed = re.findall(r"^    (\w+) ", ast.get_docstring(ast.parse((DEV / "__init__.py").read_text())), re.M)
    assert len(scripts) >= 8 and sorted(listed) == scripts, (listed, scripts)
    assert not [name for name in listed if (REPO / "tools" / f"{name}.py").exists()]
    for name, (module, _) in cli.COMMANDS.items():
        origin = Path(importlib.util.find_spec(module).origin).resolve()
        assert module.startswith("tpo_bench.") and not origin.is_relative_to(DEV.resolve()), (name, origin)
        assert origin.parent in rooms, (name, origin)
        assert module.rpartition(".")[2] not in listed and name.replace("-", "_") not in listed, name
    assert not [p for p, folder in installed.items()
                if p.split(".")[-1] == "dev" or (REPO / folder).resolve().is_relative_to(DEV.resolve())]
    assert "dev" not in tpo_bench.ROOMS and not (REPO / "tpo_bench" / "dev").exists()


@pytest.mark.slow  # a process per script
@pytest.mark.parametrize("script", sorted(p.stem for p in DEV.glob("*.py") if has_main_guard(p)))
def test_each_maintenance_script_runs_from_the_checkout(script):
    proc = subprocess.run([sys.executable, "-m", f"dev.{script}", "--help"], cwd=REPO, text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stdout + proc.stderr


def test_no_command_lists_them_and_an_unknown_one_exits_2(capsys):
    assert cli.main([]) == 0
    listing = capsys.readouterr().out
    assert all(f"  {name} " in listing for name in cli.COMMANDS)
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert cli.main(["migrate", "ROOT", "--no-such-flag"]) == 2  # the command's own exit code
    assert "--no-such-flag" in capsys.readouterr().err


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"tpo-bench {version('tpo-bench')}\n"


def test_the_collect_hint_names_a_command_that_runs_where_the_user_is(tmp_path, monkeypatch, capsys):
    """plot without a table says how to make one: `python analysis/collect.py` at the root
    of this checkout, where that path is this code's collect; elsewhere (an installed
    package, another folder) the installed command, which runs from any folder."""
    from tpo_bench.analysis import plot

    def hint(cwd: Path) -> str:
        monkeypatch.chdir(cwd)
        assert plot.main(["--results", str(tmp_path / "none.parquet")]) == 2
        [said] = re.findall(r"make it with `([^`]+)`", capsys.readouterr().err)
        return said

    outside = hint(tmp_path)
    assert outside.split() == ["tpo-bench", "collect"]
    assert cli.COMMANDS[outside.split()[1]][0] == "tpo_bench.analysis.collect"
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "collect.py").write_text("# another checkout's collect\n")
    assert hint(tmp_path) == outside  # that path is not this code's
    at_root = hint(REPO).split()
    assert at_root[0] == "python" and (REPO / at_root[1]).resolve() == Path(plot.__file__).resolve().with_name("collect.py")


def tpo_bench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout, from any directory
    return subprocess.run([sys.executable, "-m", "tpo_bench.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env=env, timeout=600)


@pytest.mark.slow  # runs a sweep, collect and plot in subprocesses
def test_run_collect_plot_through_the_one_entry(tmp_path: Path):
    sweep = tpo_bench("run", "-m", "algo=tpo,dg", "seed=0", *TINY, cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    runs = run_dirs(tmp_path / "outputs")
    assert sorted(summary(r)["algo"] for r in runs) == ["dg", "tpo"]
    assert tpo_bench("collect", cwd=tmp_path).returncode == 0
    assert (tmp_path / "outputs" / "results.parquet").is_file()
    plot = tpo_bench("plot", cwd=tmp_path)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "outputs" / "plots" / "demo.png").stat().st_size > 0
    # a command's own arguments and exit code pass through
    bad = tpo_bench("migrate", "ROOT", "--no-such-flag", cwd=tmp_path)
    assert bad.returncode == 2 and "--no-such-flag" in bad.stderr
    assert "--dry-run" in tpo_bench("migrate", "--help", cwd=tmp_path).stdout
