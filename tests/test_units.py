"""Small modules checked directly and in process (the fast tier's share of modules the
end-to-end tests otherwise reach only through subprocesses): the registry, the
checkpoint file, the tasks' shared checks and initialiser, the optuna trial scoring."""
import math

import pandas as pd
import pytest
import torch

from tpo_bench.bench import checkpoint
from tpo_bench.contract.registry import Registry, UnknownName
from tpo_bench.contract.schema import CHECKPOINT
from hydra_plugins.bench_optuna._trials import curve_value, score
from tpo_bench.tasks._checks import positive
from tpo_bench.tasks._nn import lecun_truncated_


def test_registry_names_the_registered_and_refuses_a_second_class():
    reg = Registry("widget")  # no plug-in registers a widget

    @reg.register("a")
    class A:
        pass

    assert reg.get("a") is A and A.registered_name == "a" and reg.names() == ["a"]
    with pytest.raises(UnknownName, match="unknown widget 'b'; registered widgets: a"):
        reg.get("b")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(type("B", (), {}))


def test_checkpoint_round_trip_and_refusals(tmp_path):
    assert checkpoint.load(tmp_path) is None
    checkpoint.save(tmp_path, {"step": 3, "rows": [1, 2]})
    state = checkpoint.load(tmp_path)
    assert state["step"] == 3 and state["rows"] == [1, 2] and state["version"] == checkpoint.VERSION
    (tmp_path / CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="damaged"):
        checkpoint.load(tmp_path)
    checkpoint.clear(tmp_path)
    assert checkpoint.load(tmp_path) is None


class _Cfg:
    episodes, batch_size, flag = 3, 0, True


def test_positive_names_the_key_and_value():
    positive(_Cfg, "episodes")
    with pytest.raises(ValueError, match=r"task.batch_size must be a positive integer, got 0"):
        positive(_Cfg, "episodes", "batch_size")
    with pytest.raises(ValueError, match="task.flag"):
        positive(_Cfg, "flag")  # a bool is not an integer here


def test_lecun_truncated_is_bounded_with_the_target_std():
    t = lecun_truncated_(torch.empty(400, 400), 64, torch.Generator().manual_seed(0))
    std = math.sqrt(1 / 64)
    assert abs(float(t.std()) - std) < 0.02 * std
    assert float(t.abs().max()) <= 2 * std / 0.87962566103423978 + 1e-6


def test_trial_value_final_and_auc_and_failures(tmp_path):
    metrics = tmp_path / "metrics.parquet"
    pd.DataFrame({"step": [2, 0, 1], "error": [0.1, 0.9, 0.5]}).to_parquet(metrics)
    assert curve_value(metrics, "final", 1) == pytest.approx(0.1)
    assert curve_value(metrics, "final", 2) == pytest.approx(0.3)
    assert curve_value(metrics, "auc", 1) == pytest.approx(0.5)
    failed = score([(0, RuntimeError("boom"))], "final", 1)
    assert failed.kind == "failed" and "seed 0: job raised RuntimeError: boom" in failed.reasons[0]


def test_job_keys_and_result_carry_what_the_sweepers_read():
    from tpo_bench.bench.jobs import explicit_keys, job_result

    assert explicit_keys(["+algo.k=4", "~task.x", "seed=1", "a=b=c"]) == {"algo.k", "task.x", "seed", "a"}
    result = job_result([{"run_dir": "r0", "status": "failed", "error_kind": "diverged", "final": {}},
                         {"run_dir": "r1", "status": "completed", "final": {"error": 0.25}}])
    assert result["error"] == 0.25
    assert result["runs"][0] == {"run_dir": "r0", "status": "failed", "reason": None, "error_kind": "diverged"}


def test_tuned_beside_untuned_is_empty_without_tuned_runs():
    from tpo_bench.analysis.tuning.tuned import lines

    assert lines(pd.DataFrame()) == []
    assert lines(pd.DataFrame({"algo.name": ["tpo", "grpo"], "task.name": ["demo"] * 2,
                               "task.episodes": [3, 3]})) == []
