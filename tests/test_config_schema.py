"""The config's schema (bench/config.py): presets hold only what differs from the
dataclass defaults, every top-level key has one default, keys outside the schema are
refused with the valid ones and a "did you mean", and the committed runs' hashes are
what their presets compose to today."""
import dataclasses
import json

import pytest
import yaml

from tpo_bench.bench.build import ConfigError, build
from tpo_bench.bench.config import (CONF, DebugConfig, RunConfig, check_overrides, defaults, register,
                          run_config)
from conftest import REPO, TINY, bench_here, compose, run_bench, run_dirs

register()


def refusal(check, *args) -> str:
    """The ConfigError message `check(*args)` raises; the test fails where it raises none."""
    with pytest.raises(ConfigError) as e:
        check(*args)
    return str(e.value)


def _same(value, default) -> bool:
    """Whether a preset's value restates the default (an int for a float field does)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default) and value == default
    if isinstance(default, float) and isinstance(value, (int, float)):
        return float(value) == default
    if isinstance(default, (list, tuple)) and isinstance(value, list):
        return list(default) == value
    return type(value) is type(default) and value == default


def _schema_entry(preset: dict, group: str) -> str | None:
    for entry in preset.get("defaults") or []:
        if isinstance(entry, dict) and f"/schema/{group}@_here_" in entry:
            return entry[f"/schema/{group}@_here_"]
    return None


def _impl(group: str, name: str) -> str:
    """The implementation a preset extends: its schema entry, or its base preset's."""
    preset = yaml.safe_load((CONF / group / f"{name}.yaml").read_text())
    if (impl := _schema_entry(preset, group)) is not None:
        return impl
    bases = [e for e in preset.get("defaults") or [] if isinstance(e, str) and not e.startswith("_")]
    assert bases, f"conf/{group}/{name}.yaml names neither a schema nor a base preset"
    return _impl(group, bases[0])


@pytest.mark.parametrize("group", ["algo", "task"])
def test_presets_restate_no_default(group):
    from tpo_bench.algorithms import ALGORITHMS
    from tpo_bench.tasks import TASKS

    registry = {"algo": ALGORITHMS, "task": TASKS}[group]
    restated = []
    for path in sorted((CONF / group).glob("*.yaml")):
        preset = yaml.safe_load(path.read_text())
        assert "impl" not in preset, f"{path.name}: the schema entry names the implementation"
        base = defaults(registry.get(_impl(group, path.stem)))
        unknown = set(preset) - set(base) - {"defaults", "name"}
        assert not unknown, f"{path.name}: {sorted(unknown)} are not keys of its dataclass"
        restated += [f"{path.name}: {k}: {v!r}" for k, v in preset.items()
                     if k in base and _same(v, base[k])]
    assert restated == []


def test_top_level_defaults_live_in_the_dataclass_only():
    top = yaml.safe_load((CONF / "config.yaml").read_text())
    assert set(top) <= {"defaults", "hydra"}, "config.yaml restates a RunConfig default"
    cfg = compose()
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert {k: cfg[k] for k in fields} == defaults(RunConfig)
    assert run_config(cfg) == RunConfig()


def test_a_top_level_key_joins_the_hash_only_by_name():
    """The run config's science is matching and its K: every other top-level key, a new
    one too, is left out of the hash only because contract.identity names it."""
    from tpo_bench.bench.config import identity_keys

    assert identity_keys() == ("match", "match_k")


def test_analysis_reads_a_preset_as_a_run_composes_it():
    """analysis.configs's view of conf/: a preset's values over its base's and its
    dataclass's, a nested group (task/arch) composed in, an experiment's task block over
    the one preset its sweep names; nothing for a name conf/ lacks."""
    from tpo_bench.analysis import configs

    grpo_no_kl = configs.algo_defaults("grpo_no_kl")
    assert (grpo_no_kl["impl"], grpo_no_kl["kl_coef"], grpo_no_kl["clip_eps"]) == ("grpo", 0.0, 0.2)
    llm = configs.experiment_task("llm_spell_backward")
    assert (llm["name"], llm["max_new_tokens"], llm["arch"]["hidden_size"]) == ("llm_spell_backward", 6, 128)
    k_sweep = configs.experiment_task("k_sweep")
    assert (k_sweep["sequence_length"], k_sweep["batch_size"], k_sweep["target"]) == (8, 256, "reverse_copy")
    assert configs.default_lr("adamw_tiny") == 3.0e-4
    assert configs.algo_defaults("no_such_algo") == {} and configs.default_lr("no_such") is None
    with pytest.raises(ValueError, match="several task presets"):
        configs.experiment_task("ablations")


@pytest.mark.parametrize("preset", sorted(
    str(p.relative_to(CONF / "experiment"))[:-5] for p in (CONF / "experiment").rglob("*.yaml")))
def test_every_experiment_fits_the_schema(preset):
    """What the experiment presets set at the top level (seeds, seeds_per_job,
    batch_seeds, ...) are schema keys."""
    run_config(compose(f"+experiment={preset}"))


# Committed runs, one per family, and the overrides their config needs beyond the presets.
COMMITTED = [
    ("terminal/reverse_h10/tpo/3fa644e253/seed=3", ["task=reverse_h10", "algo=tpo"]),
    ("terminal/reverse_h10/grpo/4b632e9e91/seed=3", ["task=reverse_h10", "algo=grpo"]),
    ("leaderboard/reverse_h7/dapo/bbca5cafc9/seed=0", ["+experiment=leaderboard/terminal_h7", "algo=dapo"]),
    ("leaderboard/sequential_reverse_flip/lpo_reverse/50fdb2dd6b/seed=0",
     ["+experiment=leaderboard/sequential_reverse_flip", "algo=lpo_reverse"]),
    ("leaderboard/mnist/tpo_lennorm/84ccbb1a33/seed=0", ["+experiment=leaderboard/mnist", "algo=tpo_lennorm"]),
    ("leaderboard/tabular_multi/gspo/42ffb7aadf/seed=0", ["+experiment=leaderboard/tabular_multi", "algo=gspo"]),
    ("llm/llm_spell_backward/tpo/faf627cc89/seed=0", ["task=llm_spell_backward", "algo=tpo"]),
]


@pytest.mark.parametrize("run,overrides", COMMITTED, ids=[r.split("/seed")[0] for r, _ in COMMITTED])
def test_committed_runs_hash_from_their_presets(run, overrides, tmp_path):
    """The config hash the presets compose to is the one the committed run recorded, and
    so is the whole science config (nothing a preset dropped changed a value)."""
    run_dir = REPO / "reproduction" / "runs" / run
    recorded = json.loads((run_dir / "config.json").read_text())
    seed = recorded.pop("seed")
    spec = build(compose(*overrides, f"seed={seed}", f"output_root={tmp_path}"))
    assert spec.config == recorded
    assert spec.config_hash == json.loads((run_dir / "summary.json").read_text())["config_hash"]
    assert spec.config_hash == run_dir.parent.name


@pytest.mark.parametrize("override,message", [
    ("+epochs=1", "unknown key epochs for the run config (top level); valid keys: algo, batch_seeds"),
    ("+epochs=1", "did you mean algo.epochs?"),
    ("++threds=4", "did you mean threads?"),
    ("+experiment=../algo/grpo", "no such experiment; valid choices: ablations"),
    ("+debug.nan_att=1", "valid keys: checkpoint_pause, nan_at, nan_error_at, sleep; did you mean debug.nan_at?"),
    ("algo.eta_=2", "unknown key algo.eta_ for algorithm 'tpo'; valid keys: anchor, epochs, eta, k"),
    ("algo.eta_=2", "did you mean algo.eta?"),
    ("task.episode=3", "for task 'seq'; valid keys: batch_size, episodes"),
    ("optim.llr=1", "for optimizer 'muon_nadam'; valid keys: lr, name; did you mean optim.lr?"),
])
def test_keys_outside_the_schema_are_refused_by_name(override, message):
    assert message in refusal(check_overrides, [override])


def test_section_keys_follow_the_chosen_preset():
    check_overrides(["algo=tpo", "algo.eta=2", "task=mnist", "task.holdout=10", "seeds=3"])
    with pytest.raises(ConfigError, match="for algorithm 'grpo'"):
        check_overrides(["algo=grpo", "algo.eta=2"])
    with pytest.raises(ConfigError, match="for algorithm 'clipped'"):  # dapo's implementation
        check_overrides(["+experiment=k_sweep", "algo=dapo", "algo.eta=2"])


@pytest.mark.parametrize("cfg,message", [
    ({"epochs": 1}, "unknown key epochs for the run config"),
    ({"threds": 4}, "did you mean threads?"),
    ({"debug": {"nan_att": 1}}, "did you mean debug.nan_at?"),
    ({"seed": True}, "seed must be a non-negative integer"),
    ({"seed": 2**63}, "seed must be an integer from 0 to 9223372036854775807 (2**63 - 1"),
    ({"threads": -1}, "threads must be a non-negative integer (0: as many"),
    ({"match": "interaction"}, "did you mean interactions?"),
    ({"batch_seeds": "yes"}, "batch_seeds must be true or false"),
])
def test_composed_config_is_checked_against_the_dataclass(cfg, message):
    """What reaches build without the command line (a sweeper, the compose API)."""
    assert message in refusal(run_config, cfg)


def test_debug_defaults_are_the_dataclass():
    assert run_config({}).debug == DebugConfig() and defaults(DebugConfig)["nan_at"] == -1


UNKNOWN = ["+epochs=1", "++threds=4", "algo.eta_=2", "+experiment=../algo/grpo", "+debug.nan_att=1"]


def _one_line_refusal(proc, out) -> None:
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "valid" in line and "append" not in proc.stderr
    assert run_dirs(out) == [] and not out.exists()


@pytest.mark.parametrize("override", UNKNOWN)
def test_cli_refuses_unknown_keys_in_one_line(override, out):
    """`python -m bench`'s entry in this process (bench_here)."""
    _one_line_refusal(bench_here(*TINY, override, f"output_root={out}"), out)


@pytest.mark.slow
def test_cli_refuses_an_unknown_key_in_one_line_from_a_process(out):
    """A real process's stderr: the one line and nothing else."""
    _one_line_refusal(run_bench(*TINY, UNKNOWN[0], f"output_root={out}", check=False), out)


def test_docs_list_every_top_level_key_with_its_default():
    from tpo_bench.bench.config import markdown_table

    assert markdown_table() in (REPO / "docs" / "configuration.md").read_text()


def test_docs_list_every_logger():
    import re

    from tpo_bench.bench.config import LOGGERS

    page = (REPO / "docs" / "tracking.md").read_text()
    assert set(re.findall(r"^\| `(\w+)`", page, re.M)) == set(LOGGERS)


def test_an_algorithm_named_on_the_command_line_is_the_one_that_runs():
    """The preset's schema names its implementation; `algo.name=grpo` on the tpo preset
    must not run TPO under GRPO's label."""
    with pytest.raises(ConfigError, match="unknown key algo.eta for algorithm 'grpo'"):
        build(compose("algo.name=grpo"), frozenset({"algo.name"}))
    assert build(compose("algo=tpo_lennorm")).algo.logp_norm == "mean"  # the preset's own label


def test_a_composed_optim_key_gets_a_did_you_mean():
    with pytest.raises(ConfigError, match=r"optim=muon_nadam takes the keys lr; got llr; did you mean optim.lr\?"):
        build({**compose(), "optim": {"name": "muon_nadam", "llr": 1e-3}})


# Presets' hashes, pinned: what run directories and the study queue are keyed by. A
# change to the schema's defaults, types or rewrites moves them.
PINNED = [
    ([], "340108885f"),
    (["algo=grpo"], "de4de3e77a"),
    (["task=reverse_h7", "algo=ppo"], "f48ed8ed16"),
    (["algo=pg", "match=interactions"], "9dab6ba6a2"),
    (["task=mnist", "algo=tpo"], "579fdec93b"),
    (["task=tabular_single", "algo=grpo"], "52c104fb9f"),
    (["task=tabular_multi", "algo=dapo"], "4765d45f76"),
    (["task=seq", "algo=dapo"], "807e4c3a15"),
    (["task=reverse_h9", "algo=dg", "optim=adam"], "95c5c5b9f8"),
    (["+experiment=leaderboard/terminal_h7", "algo=rloo"], "b8849de7bb"),
    (["algo.eta=0.5", "seed=3"], "d29776c018"),
]


@pytest.mark.parametrize("overrides,pinned", PINNED, ids=[" ".join(o) or "default" for o, _ in PINNED])
def test_preset_hashes_are_pinned(overrides, pinned, tmp_path):
    assert build(compose(*overrides, f"output_root={tmp_path}")).config_hash == pinned


@pytest.mark.parametrize("override,message", [
    ("seed=abc", "seed must be a non-negative integer, got 'abc'"),
    ("seed=0,1,-2", "seed must be a non-negative integer, got -2"),
    ("seed=0,99999999999999999999", "seed must be an integer from 0 to 9223372036854775807 (2**63 - 1: "
     "metrics.parquet stores it as a 64-bit integer), got 99999999999999999999"),
    ("batch_seeds=sometimes", "batch_seeds must be true or false, got 'sometimes'"),
    ("plugins=my_pkg", "plugins must be a list of module names, got 'my_pkg'"),
    ("match=interaction", "match='interaction' is not one of prompts, interactions; did you mean interactions?"),
])
def test_top_level_values_are_checked_before_hydra_composes(override, message):
    assert message in refusal(check_overrides, [override])


@pytest.mark.parametrize("override,key", [("seed=abc", "seed"), ("plugins=x", "plugins"),
                                          ("debug.nan_at=soon", "debug.nan_at")])
def test_hydra_composes_a_typed_run_config(override, key):
    """What reaches Hydra without the command-line check (a sweeper's job, a preset) meets
    RunConfig's types in the node Hydra composes."""
    with pytest.raises(Exception) as e:
        compose(override)
    chain = [e.value, e.value.__cause__]
    assert any(f"full_key: {key}" in str(x) for x in chain if x is not None)
