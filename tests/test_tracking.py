"""logger=tensorboard | wandb | mlflow (bench/tracking.py): each writes every recorded
row, read back here with the tracker's own reader and compared with the run's
metrics.parquet; a seed-batched job logs each seed as its own run; a failing logger
warns once and the parquet record stands; the logger never enters the config hash."""
import json
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpo_bench.bench import tracking
from tpo_bench.bench.build import ConfigError, build
from tpo_bench.bench.config import check_overrides
from conftest import REPO, TINY, compose, train_here, wait_for

TRACKED = ("error", "loss", "reward_mean", "grad_norm")


def _train(tmp_path: Path, logger: str, *extra: str):
    spec = build(compose(*TINY, f"logger={logger}", f"output_root={tmp_path}", *extra))
    assert train_here(spec)["status"] == "completed"
    return spec, pd.read_parquet(spec.run_dir / "metrics.parquet")


def _expect(df: pd.DataFrame, key: str) -> dict[int, float]:
    return dict(zip(df["step"].astype(int), df[key].astype(float)))


@pytest.mark.slow
def test_tensorboard_events_hold_every_recorded_row(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec, df = _train(tmp_path, "tensorboard")
    events = EventAccumulator(str(spec.run_dir / "tensorboard"))
    events.Reload()
    for key in TRACKED:
        got = {e.step: e.value for e in events.Scalars(key)}
        assert got == pytest.approx(_expect(df, key), rel=1e-6)  # stored as float32
    assert "seed: 0" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()


def _wandb_records(run_dir: Path):
    """The records of a W&B offline run file (run-<id>.wandb): the log format W&B writes
    (a 7-byte file header, 32 KiB blocks of chunks with a crc/length/type header),
    each record parsed with W&B's own protobuf."""
    from wandb.proto import wandb_internal_pb2 as pb

    [path] = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    data, pos, buf = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # the block's zero padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # full / first, else middle / last
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


@pytest.mark.slow  # W&B starts its own service process
def test_wandb_offline_run_holds_config_group_and_rows(tmp_path, monkeypatch):
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    spec, df = _train(tmp_path / "out", "wandb")
    wait_for(lambda: any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(spec.run_dir)),
             timeout=60)  # W&B's service may still be writing the file out after finish()
    records = list(_wandb_records(spec.run_dir))
    [meta] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {_key(u): json.loads(u.value_json) for u in meta.config.update}
    assert meta.run_group == f"demo/tpo/{spec.config_hash}"
    assert config["seed"] == 0 and config["config_hash"] == spec.config_hash
    assert config["task.batch_size"] == 4
    history = [{_key(i): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    for key in TRACKED:
        assert {h["_step"]: h[key] for h in history} == pytest.approx(_expect(df, key))


def _mlflow_runs(root: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(root / "mlruns").absolute().as_uri())
    experiment = client.get_experiment_by_name("tpo-bench")
    return client, client.search_runs([experiment.experiment_id])


@pytest.mark.slow
def test_mlflow_file_store_holds_params_tags_and_rows(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec, df = _train(tmp_path, "mlflow")
    client, [found] = _mlflow_runs(tmp_path)
    assert found.data.tags["group"] == f"demo/tpo/{spec.config_hash}"
    assert found.data.params["seed"] == "0" and found.info.status == "FINISHED"
    for key in TRACKED:
        got = {m.step: m.value for m in client.get_metric_history(found.info.run_id, key)}
        assert got == pytest.approx(_expect(df, key))


@pytest.mark.slow
def test_batched_seeds_are_tracked_as_runs_of_their_own(tmp_path, monkeypatch):
    from tpo_bench.bench import runner
    from tpo_bench.bench.jobs import job_specs

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = compose(*TINY, "logger=mlflow", "seeds_per_job=2", "batch_seeds=true", f"output_root={tmp_path}")
    specs = job_specs(cfg, frozenset())
    assert [s["status"] for s in runner.run_seeds(specs)] == ["completed", "completed"]
    client, found = _mlflow_runs(tmp_path)
    by_seed = {int(r.data.params["seed"]): r for r in found}
    assert sorted(by_seed) == [0, 1]
    for spec in specs:
        df = pd.read_parquet(spec.run_dir / "metrics.parquet")
        got = {m.step: m.value for m in client.get_metric_history(by_seed[spec.run.seed].info.run_id, "error")}
        assert got == pytest.approx(_expect(df, "error"))


@pytest.mark.slow  # starts a process
def test_a_failing_logger_warns_once_and_the_parquet_stands(tmp_path, monkeypatch, capsys):
    class Broken:
        def __init__(self, spec, attempt):
            pass

        def log(self, values, step):
            raise OSError("disk full")

        def close(self, status):
            raise AssertionError("a broken tracker is not closed")

    monkeypatch.setitem(tracking.BACKENDS, "tensorboard", Broken)
    monkeypatch.setattr(tracking.Tracker, "warned", set())
    spec, df = _train(tmp_path, "tensorboard")
    plain = build(compose(*TINY, f"output_root={tmp_path / 'plain'}"))
    train_here(plain)
    expected = pd.read_parquet(plain.run_dir / "metrics.parquet").drop(columns="wall_s")
    pd.testing.assert_frame_equal(df.drop(columns="wall_s"), expected)
    assert capsys.readouterr().err.count("logger=tensorboard failed at step 0 (OSError: disk full)") == 1


def test_logger_is_not_part_of_the_run_identity(tmp_path):
    plain = build(compose(*TINY, f"output_root={tmp_path}"))
    for logger in ("tensorboard", "wandb", "mlflow"):
        tracked = build(compose(*TINY, f"logger={logger}", f"output_root={tmp_path}"))
        assert tracked.logger["name"] == logger
        assert (tracked.config_hash, tracked.run_dir, tracked.config) == \
            (plain.config_hash, plain.run_dir, plain.config)


@pytest.mark.parametrize("node,message", [
    ({"name": "tensorbord"}, "logger='tensorbord' is not one of none, tensorboard, wandb, mlflow; "
                             "did you mean tensorboard?"),
    ({"name": "wandb", "projct": "x"}, "unknown key logger.projct for logger 'wandb'; valid keys: "
                                       "entity, mode, name, project; did you mean logger.project?"),
])
def test_logger_keys_are_checked(node, message):
    with pytest.raises(ConfigError) as e:
        tracking.logger_config(node)
    assert message in str(e.value)


@pytest.mark.parametrize("env,netrc_host,configured,mode", [
    ({}, None, None, "offline"),
    ({"WANDB_API_KEY": "k"}, None, None, "online"),
    ({}, "api.wandb.ai", None, "online"),
    ({"WANDB_MODE": "disabled", "WANDB_API_KEY": "k"}, None, None, "disabled"),
    ({"WANDB_API_KEY": "k"}, None, "offline", "offline"),
])
def test_wandb_is_offline_until_configured(env, netrc_host, configured, mode, tmp_path, monkeypatch):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    netrc = tmp_path / ".netrc"
    if netrc_host:
        netrc.write_text(f"machine {netrc_host}\n  login user\n  password secret\n")
        netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tracking.wandb_mode(configured) == mode


def test_numbers_drop_the_step_and_what_is_not_a_finite_number():
    row = {"step": 3, "error": 0.5, "rollouts": 12, "nan": float("nan"), "flag": True, "name": "x"}
    assert tracking.numbers(row) == {"error": 0.5, "rollouts": 12.0}
    assert np.isfinite(list(tracking.numbers(row).values())).all()


def _page_commands() -> list[list[str]]:
    """The `python -m bench` lines of docs/tracking.md's examples, as override lists."""
    import re
    import shlex

    page = (REPO / "docs" / "tracking.md").read_text()
    lines = [line for block in re.findall(r"```bash\n(.*?)```", page, re.S)
             for line in block.splitlines() if line.startswith("python -m bench")]
    assert len(lines) >= 3
    return [shlex.split(line)[3:] for line in lines]


@pytest.mark.parametrize("line", _page_commands(), ids=" ".join)
def test_the_tracking_pages_examples_compose(line, tmp_path):
    """Each example's command line passes the key check and composes (a sweep: its first
    job) to a run whose logger holds the values the line gives."""
    overrides = [o for o in line if o != "-m"]
    check_overrides(overrides)
    first = [o if "[" in o else o.split(",")[0] for o in overrides]
    spec = build(compose(*first, f"output_root={tmp_path}"))
    given = dict(o.split("=", 1) for o in overrides)
    assert spec.logger["name"] == given["logger"]
    assert {k: spec.logger[k.removeprefix("logger.")] for k in given if k.startswith("logger.")} \
        == {k: v for k, v in given.items() if k.startswith("logger.")}


def test_every_logger_key_the_page_names_is_a_key():
    import re

    from tpo_bench.bench.config import LOGGERS, defaults

    page = (REPO / "docs" / "tracking.md").read_text()
    named = set(re.findall(r"logger\.(\w+)", page))
    assert named and named <= {k for cls in LOGGERS.values() for k in defaults(cls)}
