"""The installed package works from any directory: a multirun from a
directory that is not the repository (editable install, as the README says), and a
non-editable install (how cluster environments are usually built) that has nothing of
the checkout on its path."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, TINY

pytestmark = pytest.mark.slow  # every test here spawns a subprocess


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **extra}


def _python(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=600)


def _completed(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("summary.json"))]


def test_multirun_from_another_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _python("-m", "bench", "-m", "seed=0,1", *TINY, cwd=elsewhere, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Unknown plugin class" not in proc.stderr
    runs = _completed(elsewhere / "outputs")
    assert sorted(r["seed"] for r in runs) == [0, 1]
    assert {r["status"] for r in runs} == {"completed"}


def test_non_editable_install_runs_from_anywhere(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is needed to build the other repository around the install")
    # The install lives inside another git repository, as a venv in a project folder
    # does: the runs must not claim that repository's commit as the code's.
    other = tmp_path / "other-project"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    subprocess.run(["git", "-C", str(other), "-c", "user.email=a@b", "-c", "user.name=a",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    site = other / "site"
    had_build = (REPO / "build").exists()
    build = _python("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(REPO), cwd=tmp_path, env=_env())
    assert build.returncode == 0, build.stdout + build.stderr
    if not had_build:  # setuptools' scratch folder, made by this test
        shutil.rmtree(REPO / "build", ignore_errors=True)
    env = _env(PYTHONPATH=str(site))
    # One interpreter: where the modules load from, and that the `bench` alias and its
    # tpo_bench name are one module object (the alias's submodule imported first).
    where = _python("-c", "import bench, bench.runner, tpo_bench.bench, tpo_bench.bench.runner as r, "
                    "tpo_bench.analysis as a; print(bench.__file__); print(r.__file__); print(a.__file__); "
                    "print(bench is tpo_bench.bench, bench.runner is tpo_bench.bench.runner)",
                    cwd=tmp_path, env=env)
    *files, same = where.stdout.splitlines() or [""]
    assert len(files) == 3, where.stdout + where.stderr
    assert all(line.startswith(str(site)) for line in files), where.stdout
    assert same.split() == ["True", "True"], where.stdout + where.stderr
    # one import name: nothing of the harness at the top level but the `bench` alias
    assert not any((site / name).exists() for name in ("tasks", "analysis", "algorithms", "contract",
                                                        "conf", "tools")), sorted(os.listdir(site))
    assert sorted(p.name for p in (site / "bench").glob("*.py")) == ["__init__.py"]
    sweep = _python("-m", "bench", "-m", "algo=tpo,dg", "seed=0", *TINY, cwd=tmp_path, env=env)
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    runs = _completed(tmp_path / "outputs")
    assert sorted(r["algo"] for r in runs) == ["dg", "tpo"]
    assert {r["git_commit"] for r in runs} == {None}
    collect = _python("-m", "tpo_bench.analysis.collect", cwd=tmp_path, env=env)
    assert collect.returncode == 0, collect.stdout + collect.stderr
    plot = _python("-m", "tpo_bench.analysis.plot", cwd=tmp_path, env=env)
    assert plot.returncode == 0, plot.stdout + plot.stderr
    assert (tmp_path / "outputs" / "plots" / "demo.png").stat().st_size > 0
    # The paper's report and the tuning report are installed with their data: the report
    # reads the paper's numbers (package data of analysis.paper) before it refuses a demo
    # table that no paper number is judged on.
    assert {p.name for p in (site / "tpo_bench" / "analysis" / "paper").glob("*.csv")} == {
        "paper_numbers.csv", "paper_seeds.csv"}
    report = _python("-m", "tpo_bench.analysis.paper.report", "--quiet", cwd=tmp_path, env=env)
    assert report.returncode == 2 and "matches any paper number" in report.stderr, report.stderr
    tuning = _python("-m", "tpo_bench.analysis.tuning.report", "--help", cwd=tmp_path, env=env)
    assert tuning.returncode == 0 and "optuna" in tuning.stdout, tuning.stderr
    # the same install, run from a project with packages named like the harness's
    project = _project_named_like_the_harness(tmp_path / "project")
    mine = _python("-m", "bench", "-m", "algo=tpo,grpo", "seed=0", "plugins=[my_plugin]", *TINY,
                   cwd=project, env=env)
    assert mine.returncode == 0, mine.stdout + mine.stderr
    assert sorted(r["algo"] for r in _completed(project / "outputs")) == ["grpo", "tpo"]


HARNESS_NAMES = ("tasks", "analysis", "algorithms", "contract", "conf")


def _project_named_like_the_harness(root: Path) -> Path:
    """A research project with its own tasks, analysis, algorithms, contract and conf
    packages (each refusing the harness's names: `from tasks import TASKS` fails, as it
    would in a user's repository), a conf/config.yaml Hydra cannot compose, and a plugin
    that imports the project's own `tasks` and records that it ran."""
    for name in HARNESS_NAMES:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            f"OWNER = 'the project'\n"
            f"def __getattr__(name):\n"
            f"    raise AttributeError(f'the project\\'s {name} has no {{name}}')\n")
    (root / "conf" / "config.yaml").write_text("defaults:\n  - not_a_preset\n")
    (root / "my_plugin.py").write_text(
        "import tasks\n"
        "from pathlib import Path\n"
        "from tpo_bench.algorithms import ALGORITHMS\n"
        "assert tasks.OWNER == 'the project' and 'tpo' in ALGORITHMS.names()\n"
        "Path('plugin_ran').write_text(tasks.__file__)\n")
    return root


def test_a_sweep_runs_from_a_project_with_packages_named_like_the_harness(tmp_path: Path) -> None:
    """A project's own tasks/, analysis/, algorithms/, contract/ and conf/ neither break
    nor shadow the harness (it imports only tpo_bench names), and its plugin still imports
    the project's own `tasks`."""
    project = _project_named_like_the_harness(tmp_path / "project")
    proc = _python("-m", "bench", "-m", "task=demo", "algo=tpo,grpo", "seed=0", "plugins=[my_plugin]",
                   *TINY[1:], cwd=project, env=_env(PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = _completed(project / "outputs")
    assert sorted(r["algo"] for r in runs) == ["grpo", "tpo"]
    assert {r["status"] for r in runs} == {"completed"}
    assert (project / "plugin_ran").read_text() == str(project / "tasks" / "__init__.py")
