"""The command line before Hydra sees it (bench/__main__.py), in process: `-m` anywhere,
and a mistyped algorithm or task name answered with the closest names and every choice."""
from pathlib import Path

from tpo_bench.bench.__main__ import multirun_first, unknown_names

CONF = Path(__file__).resolve().parent.parent / "conf"


def test_multirun_flag_anywhere_goes_first():
    assert multirun_first(["algo=tpo", "-m", "seed=0,1"]) == ["-m", "algo=tpo", "seed=0,1"]
    assert multirun_first(["algo=tpo", "--multirun"]) == ["--multirun", "algo=tpo"]
    assert multirun_first(["algo=tpo", "seed=1"]) == ["algo=tpo", "seed=1"]


def test_mistyped_algorithm_gets_did_you_mean_and_choices():
    msg = unknown_names(["task=demo", "algo=grpoo"], CONF)
    assert msg.startswith("error: algo=grpoo: no such algorithm; did you mean grpo")
    listed = msg.split("valid choices: ")[1].split(", ")
    assert listed == sorted(p.stem for p in (CONF / "algo").glob("*.yaml"))


def test_mistyped_task_in_a_sweep_list_is_named():
    msg = unknown_names(["-m", "task=demo,reverse_h1O", "algo=tpo"], CONF)
    assert "task=reverse_h1O: no such task; did you mean reverse_h10" in msg
    assert "mnist" in msg.split("valid choices: ")[1].split(", ")


def test_far_off_name_lists_choices_without_a_guess():
    msg = unknown_names(["algo=zzzzzz"], CONF)
    assert "did you mean" not in msg and "valid choices: ce," in msg


def test_known_names_and_what_hydra_checks_pass():
    assert unknown_names(["algo=tpo,grpo", "+algo=dg", "task=demo", "algo.eta=2"], CONF) is None
    assert unknown_names(["algo=myalgo", "hydra.searchpath=[file:///x]"], CONF) is None
    assert unknown_names(["task=glob(rev*)", "algo=${oc.env:A}"], CONF) is None
