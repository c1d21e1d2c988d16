"""The command line before Hydra composes it (bench/__main__.py, bench/config.py), in
process: `-m` anywhere, the overrides told from Hydra's flags, and a mistyped algorithm,
task or experiment name answered with the closest names and every choice."""
import pytest

from tpo_bench.bench.__main__ import command_line_overrides, multirun_first
from tpo_bench.bench.config import CONF, ConfigError, check_overrides


def _refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        check_overrides(list(overrides))
    return str(e.value)


def test_multirun_flag_anywhere_goes_first():
    assert multirun_first(["algo=tpo", "-m", "seed=0,1"]) == ["-m", "algo=tpo", "seed=0,1"]
    assert multirun_first(["algo=tpo", "--multirun"]) == ["--multirun", "algo=tpo"]
    assert multirun_first(["algo=tpo", "seed=1"]) == ["algo=tpo", "seed=1"]


@pytest.mark.parametrize("argv,overrides", [
    (["-m", "algo=tpo", "seed=0,1"], ["algo=tpo", "seed=0,1"]),
    (["--cfg", "job", "task=demo"], ["task=demo"]),
    (["-c", "hydra", "-p", "hydra.job", "algo=grpo"], ["algo=grpo"]),
    (["--config-dir=/x", "-cn", "other", "seed=3"], ["seed=3"]),
    (["-sc", "install=bash"], ["install=bash"]),
    (["--info", "defaults", "--resolve", "algo=tpo"], ["algo=tpo"]),
    (["--help"], []),
    (["--cfg", "nonsense", "algo=tpo"], []),  # Hydra refuses the line and says why
    (["--info", "algo=tpo"], []),
])
def test_the_overrides_are_told_from_hydras_flags(argv, overrides):
    assert command_line_overrides(argv) == overrides


def test_mistyped_algorithm_gets_did_you_mean_and_choices():
    msg = _refused("task=demo", "algo=grpoo")
    assert msg.startswith("algo=grpoo: no such algorithm; did you mean grpo")
    listed = msg.split("valid choices: ")[1].split(", ")
    assert listed == sorted(p.stem for p in (CONF / "algo").glob("*.yaml"))


def test_mistyped_task_in_a_sweep_list_is_named():
    msg = _refused("task=demo,reverse_h1O", "algo=tpo")
    assert "task=reverse_h1O: no such task; did you mean reverse_h10" in msg
    assert "mnist" in msg.split("valid choices: ")[1].split(", ")
    assert not any(c.startswith("arch") for c in msg.split("valid choices: ")[1].split(", "))


def test_far_off_name_lists_choices_without_a_guess():
    msg = _refused("algo=zzzzzz")
    assert "did you mean" not in msg and "valid choices: ce," in msg


def test_a_users_search_path_adds_its_presets(tmp_path):
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "myalgo.yaml").write_text("name: tpo\n")
    check_overrides(["algo=myalgo", f"hydra.searchpath=[file://{tmp_path}]"])
    msg = _refused("algo=myalgoo", f"hydra.searchpath=[file://{tmp_path}]")
    assert "did you mean myalgo?" in msg and "myalgo, pg" in msg


def test_known_names_and_what_hydra_checks_pass():
    check_overrides(["algo=tpo,grpo", "+algo=dg", "task=demo", "algo.eta=2"])
    check_overrides(["algo=myalgo", "hydra.searchpath=[pkg://my_pkg.conf]"])
    check_overrides(["task=glob(rev*)", "algo=${oc.env:A}"])
