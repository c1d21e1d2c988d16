"""docs/extending.md's recipe followed in a temp dir: its algorithm and task modules as
plug-ins, and presets holding only `name:`. The preset comes with its implementation's
defaults, so a key is set on the command line as for a shipped preset, and a typo gets
the valid keys."""
import json
import re

import pytest

from conftest import REPO, run_bench, run_dirs


@pytest.fixture
def recipe(tmp_path):
    """The page's two python blocks as modules myalgo and arms, and their presets."""
    page = (REPO / "docs" / "extending.md").read_text()
    algo, task = re.findall(r"```python\n(.*?)```", page, re.S)[:2]
    assert '@register("myalgo")' in algo and '@register("arms")' in task
    (tmp_path / "myalgo.py").write_text(algo)
    (tmp_path / "arms.py").write_text(task)
    for group, name in (("algo", "myalgo"), ("task", "arms")):
        (tmp_path / "conf" / group).mkdir(parents=True)
        (tmp_path / "conf" / group / f"{name}.yaml").write_text(f"name: {name}\n")
    return tmp_path


def _bench(recipe, *overrides):
    return run_bench("task=arms", "algo=myalgo", "optim=adam", "optim.lr=0.05",
                     "plugins=[myalgo,arms]", f"hydra.searchpath=[file://{recipe}/conf]",
                     f"output_root={recipe / 'out'}", *overrides, check=False,
                     env={"PYTHONPATH": str(recipe)})


@pytest.mark.slow
def test_a_plugin_preset_takes_its_schemas_keys(recipe):
    proc = _bench(recipe, "task.episodes=2", "algo.epochs=1")
    assert proc.returncode == 0, proc.stderr
    [run_dir] = run_dirs(recipe / "out")
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["task"]["episodes"], config["algo"]["epochs"]) == (2, 1)


@pytest.mark.slow
@pytest.mark.parametrize("override,message", [
    ("task.episods=2", "unknown key task.episods for task 'arms'; valid keys: batch_size, "
                       "episodes, name; did you mean task.episodes?"),
    ("algo.epoch=2", "unknown key algo.epoch for algorithm 'myalgo'; valid keys: epochs, k, "
                     "name; did you mean algo.epochs?"),
])
def test_a_typo_in_a_plugin_presets_keys_gets_the_valid_keys(recipe, override, message):
    proc = _bench(recipe, override)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line == f"error: {message}"
    assert not (recipe / "out").exists()
