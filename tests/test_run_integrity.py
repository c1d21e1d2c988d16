"""A hostile or unlucky output tree, a bad value, a damaged record: what the runner does
with each (one clear line, a truthful record, nothing outside the run touched)."""
import errno
import io as pyio
import json
import os
import pathlib

import pytest

from conftest import TINY, compose, spec_for, train_here


# ------------------------------------------------------------------ links under output_root

def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path):
    spec = spec_for(tmp_path / "out")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    spec.run_dir.mkdir(parents=True)
    (spec.run_dir / ".lock").symlink_to(victim)
    answer = train_here(spec)
    assert answer["status"] == "refused"
    assert ".lock is a symbolic link" in answer["reason"] and str(victim) in answer["reason"]
    assert "\n" not in answer["reason"]
    assert victim.read_text() == "keep me"
    assert not (spec.run_dir / "summary.json").exists()


@pytest.mark.parametrize("what", ["summary.json", "checkpoint.pt", "config_dir", "task_dir"])
def test_a_link_in_a_runs_path_is_refused(tmp_path, what):
    spec = spec_for(tmp_path / "out")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if what.endswith("_dir"):
        level = spec.run_dir.parent if what == "config_dir" else spec.run_dir.parents[2]
        level.parent.mkdir(parents=True)
        level.symlink_to(elsewhere, target_is_directory=True)
        link = level
    else:
        spec.run_dir.mkdir(parents=True)
        (elsewhere / what).write_text(json.dumps({"status": "completed"}))
        link = spec.run_dir / what
        link.symlink_to(elsewhere / what)
    answer = train_here(spec)
    assert answer["status"] == "refused" and f"{link} is a symbolic link" in answer["reason"]
    assert sorted(p.name for p in elsewhere.iterdir()) == ([] if what.endswith("_dir") else [what])


def test_the_atomic_writer_refuses_to_replace_a_link(tmp_path):
    from tpo_bench.contract import io
    target = tmp_path / "target.json"
    target.write_text("{}")
    (tmp_path / "summary.json").symlink_to(target)
    with pytest.raises(io.LinkRefused, match="summary.json is a symbolic link"):
        io.write_json(tmp_path / "summary.json", {"status": "completed"})
    assert target.read_text() == "{}" and (tmp_path / "summary.json").is_symlink()
    assert not list(tmp_path.glob(".*.tmp"))


# ------------------------------------------------------------------ folders of another user

def test_an_unwritable_run_folder_is_one_line_and_a_failure(tmp_path, monkeypatch):
    spec = spec_for(tmp_path / "out")
    real_mkdir = pathlib.Path.mkdir

    def mkdir(self, *a, **k):
        if str(self).startswith(str(spec.run_dir.parent)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    answer = train_here(spec)
    assert answer["status"] == "failed" and answer["error_kind"] == "io"
    assert "Permission denied" in answer["reason"] and str(spec.run_dir) in answer["reason"]
    assert "\n" not in answer["reason"]


def test_a_run_that_failed_before_writing_counts_as_failed_not_waiting(tmp_path):
    from hydra_plugins.bench_sweeper._progress import SweepProgress
    dirs = [tmp_path / "a" / "seed=0", tmp_path / "b" / "seed=0"]
    out = pyio.StringIO()
    with SweepProgress(dirs, every_s=3600, force=False, stream=out) as progress:
        pass
    progress.finish({}, failed=[str(dirs[0])])
    last = out.getvalue().strip().splitlines()[-1]
    assert "1 failed" in last and "1 waiting" in last, last


# ------------------------------------------------------------------ the seed; the run's end

@pytest.mark.parametrize("seed", [2**63, 99999999999999999999])
def test_a_seed_past_64_bits_is_refused_up_front(tmp_path, seed):
    from tpo_bench.bench.build import ConfigError
    with pytest.raises(ConfigError, match=r"seed must be an integer from 0 to 9223372036854775807"):
        spec_for(tmp_path, f"seed={seed}")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    assert spec_for(tmp_path, f"seed={2**63 - 1}").run.seed == 2**63 - 1


@pytest.mark.slow  # starts a process
def test_an_error_writing_the_table_leaves_a_failed_record(tmp_path, monkeypatch):
    """Any exception at the run's end, not only an OS error: never `running` forever."""
    import pandas as pd

    def overflow(self, *a, **k):
        raise OverflowError("int too big to convert")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", overflow)
    spec = spec_for(tmp_path)
    answer = train_here(spec)
    on_disk = json.loads((spec.run_dir / "summary.json").read_text())
    assert on_disk["status"] == answer["status"] == "failed" and on_disk["error_kind"] == "error"
    assert "OverflowError writing metrics.parquet" in on_disk["reason"]
    assert not list(spec.run_dir.glob(".*.tmp"))


# ------------------------------------------------------------------ a damaged completed run

@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("damage", ["removed", "truncated"])
def test_a_completed_run_without_its_table_is_damaged_not_skipped(tmp_path, damage, capsys):
    spec = spec_for(tmp_path)
    assert train_here(spec)["status"] == "completed"
    table = spec.run_dir / "metrics.parquet"
    if damage == "removed":
        table.unlink()
    else:
        table.write_bytes(table.read_bytes()[:100])
    answer = train_here(spec)
    assert answer["status"] == "refused"
    assert "metrics.parquet" in answer["reason"] and "damaged" in answer["reason"]
    assert "force=true re-runs it" in answer["reason"]
    assert "already completed" not in capsys.readouterr().out
    import dataclasses
    assert train_here(dataclasses.replace(spec, run=dataclasses.replace(spec.run, force=True)))["status"] == "completed"
    assert table.stat().st_size > 100


# ------------------------------------------------------------------ non-finite metrics

class NanGrad:
    """An algorithm whose loss keeps its value but whose gradient is NaN at one episode."""

    def __init__(self, algo, at: int):
        import torch

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                return g * float("nan")

        self.algo, self.at, self.calls, self.fn = algo, at, 0, Fn

    def __getattr__(self, name):
        return getattr(self.algo, name)

    def loss(self, batch, logp):
        out = self.algo.loss(batch, logp)
        self.calls += 1
        if (self.calls - 1) // self.algo.epochs == self.at:
            out.loss = self.fn.apply(out.loss)
        return out


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("at", [0, 2])  # the first episode, and the last (TINY has 3)
def test_a_nan_gradient_ends_the_run_as_diverged_naming_it(tmp_path, at):
    import dataclasses
    spec = spec_for(tmp_path)
    spec = dataclasses.replace(spec, algo=NanGrad(spec.algo, at))
    answer = train_here(spec)
    assert answer["status"] == "failed" and answer["error_kind"] == "diverged", answer["reason"]
    assert f"non-finite grad_norm nan, param_change nan at step {at}" in answer["reason"]
    assert answer["rows"] == at  # the NaN step is not recorded


@pytest.mark.slow  # starts a process
def test_a_nan_error_with_a_finite_loss_ends_the_run_as_diverged(tmp_path):
    spec = spec_for(tmp_path, "debug.nan_error_at=1")
    answer = train_here(spec)
    assert answer["status"] == "failed" and answer["error_kind"] == "diverged"
    assert "non-finite error nan at step 1" in answer["reason"]


def test_an_undefined_diagnostic_may_be_nan_but_never_infinite():
    from tpo_bench.bench.runner import check_finite
    check_finite({"loss": 1.0, "q_success": float("nan"), "rollouts": 3}, 0)
    with pytest.raises(FloatingPointError, match="q_success inf at step 4"):
        check_finite({"loss": 1.0, "q_success": float("inf")}, 4)
    with pytest.raises(FloatingPointError, match="kl nan at step 4"):
        check_finite({"loss": 1.0, "kl": float("nan")}, 4)


# ------------------------------------------------------------------ code changes

@pytest.mark.slow  # starts a process
def test_a_run_records_the_fingerprint_of_its_code(tmp_path):
    spec = spec_for(tmp_path)
    train_here(spec)
    s = json.loads((spec.run_dir / "summary.json").read_text())
    assert len(s["code_fingerprint"]) == 16 and int(s["code_fingerprint"], 16) >= 0
    assert s["code_fingerprint"] == spec.code_fingerprint
    assert {"algorithms/tpo.py", "algorithms/_common.py", "contract/batch.py"} <= set(s["code_files"])
    assert {"bench/optim.py", "bench/runner.py"} <= set(s["code_files"])
    assert not any(f.startswith(("analysis/", "tools/")) for f in s["code_files"])
    assert spec_for(tmp_path, "algo=grpo").code_fingerprint != spec.code_fingerprint


PLUGIN = '''"""A user's own algorithm."""
from tpo_bench.algorithms.tpo import TPO


class Mine(TPO):
    def scale(self):
        return 1.0
'''


def test_the_fingerprint_ignores_comments_and_docstrings_not_code(tmp_path, monkeypatch):
    import importlib
    from tpo_bench.bench.fingerprint import code_fingerprint
    (tmp_path / "fp_plugin_mine.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = importlib.import_module("fp_plugin_mine").Mine
    first, files = code_fingerprint(cls)
    assert str(tmp_path / "fp_plugin_mine.py") in files and "algorithms/tpo.py" in files
    path = tmp_path / "fp_plugin_mine.py"
    path.write_text(PLUGIN.replace('"""A user\'s own algorithm."""', '"""Another docstring."""')
                    .replace("return 1.0", "return 1.0  # a comment\n\n"))
    os.utime(path, ns=(1, 1))  # another file state than the cached one
    assert code_fingerprint(cls)[0] == first
    path.write_text(PLUGIN.replace("return 1.0", "return 2.0"))
    assert code_fingerprint(cls)[0] != first


def _recorded_under_other_code(tmp_path, *args):
    spec = spec_for(tmp_path, *args)
    assert train_here(spec)["status"] == "completed"
    path = spec.run_dir / "summary.json"
    s = json.loads(path.read_text())
    path.write_text(json.dumps({**s, "code_fingerprint": "0123456789abcdef"}))
    return spec


@pytest.mark.slow  # starts a process
def test_a_run_completed_under_other_code_is_refused_by_default(tmp_path):
    spec = _recorded_under_other_code(tmp_path)
    answer = train_here(spec)
    assert answer["status"] == "refused"
    for text in ("0123456789abcdef", spec.code_fingerprint, "on_code_change=rerun",
                 "on_code_change=keep"):
        assert text in answer["reason"]


@pytest.mark.slow  # starts a process
def test_on_code_change_keep_skips_and_says_so(tmp_path, capsys):
    _recorded_under_other_code(tmp_path)
    capsys.readouterr()
    answer = train_here(spec_for(tmp_path, "on_code_change=keep"))
    assert answer["status"] == "completed" and answer["code_fingerprint"] == "0123456789abcdef"
    assert "the old result is kept (on_code_change=keep)" in capsys.readouterr().out


@pytest.mark.slow  # starts a process
def test_on_code_change_rerun_trains_again_under_todays_code(tmp_path):
    spec = _recorded_under_other_code(tmp_path)
    answer = train_here(spec_for(tmp_path, "on_code_change=rerun"))
    assert answer["status"] == "completed" and answer["code_fingerprint"] == spec.code_fingerprint
    assert answer["attempts"] == 2


@pytest.mark.slow  # starts a process
def test_a_run_without_a_fingerprint_is_skipped_saying_so(tmp_path, capsys):
    spec = spec_for(tmp_path)
    train_here(spec)
    path = spec.run_dir / "summary.json"
    s = json.loads(path.read_text())
    del s["code_fingerprint"]
    path.write_text(json.dumps(s))
    capsys.readouterr()
    assert train_here(spec)["status"] == "completed"
    out = capsys.readouterr().out
    assert "already completed" in out and "records no code fingerprint" in out


def test_on_code_change_is_not_identity_and_is_checked(tmp_path):
    from tpo_bench.bench.build import ConfigError
    assert spec_for(tmp_path, "on_code_change=keep").config_hash == spec_for(tmp_path).config_hash
    with pytest.raises(ConfigError, match="on_code_change='nope' is not one of refuse, rerun, keep"):
        spec_for(tmp_path, "on_code_change=nope")


# ------------------------------------------------------------------ padded steps; huge ratios

def _group_batch(mask=None, junk: float = 0.0):
    import torch
    from tpo_bench.contract.batch import Batch
    g = torch.Generator().manual_seed(0)
    logp_old = -torch.rand(2, 4, 3, generator=g)
    rewards = torch.rand(2, 4, 3, generator=g)
    if mask is not None:
        logp_old, rewards = logp_old * mask, rewards * mask
        logp_old = logp_old.masked_fill(~mask, junk) if junk else logp_old
    return Batch.sampled_group(logp_old, rewards, rewards.sum(-1) > 1.5, mask=mask)


def test_junk_in_a_padded_step_is_refused_by_the_batch():
    import torch
    mask = torch.ones(2, 4, 3, dtype=torch.bool)
    mask[0, 1, 2] = False
    _group_batch(mask)  # zeros there: fine
    with pytest.raises(ValueError, match="batch.logp_old holds non-zero values at padded steps"):
        _group_batch(mask, junk=-1000.0)
    with pytest.raises(ValueError, match="logp_old"):
        _group_batch(mask, junk=float("nan"))


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "gspo", "dapo", "cispo"])
@pytest.mark.parametrize("shift", [1000.0, -1000.0])
def test_a_huge_log_ratio_is_clamped_not_nan(preset, shift):
    import torch
    from tpo_bench.algorithms import ALGORITHMS
    section = compose(f"algo={preset}")["algo"]
    impl = section.pop("impl", None) or section["name"]
    cls = ALGORITHMS.get(impl)
    import dataclasses
    fields = {f.name for f in dataclasses.fields(cls)}
    algo = cls(**{k: v for k, v in section.items() if k in fields})
    batch = _group_batch()
    logp = (batch.logp_old + shift).requires_grad_()
    out = algo.loss(batch, logp)
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(logp.grad).all()
    assert all(v == v and abs(v) != float("inf") for k, v in out.metrics.items()
               if k in ("clip_frac", "kl"))


# ------------------------------------------------------------------ one sweep per study

@pytest.mark.slow
def test_a_second_sweep_on_a_study_is_refused_naming_the_first(tmp_path):
    """The first sweep holds the study's lock (here a process that holds it, as a sweep
    does while it runs): the second exits 1 in one line naming it, before touching the
    study, so it cannot mark the first's live trials interrupted."""
    import subprocess
    import sys
    pytest.importorskip("optuna")
    from conftest import REPO, run_bench
    lock = tmp_path / ".optuna" / "demo-tpo.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, json, os, socket, sys, time; "
         "os.makedirs(os.path.dirname(sys.argv[1])); fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); "
         "os.write(fd, json.dumps({'pid': os.getpid(), 'host': socket.gethostname()}).encode()); "
         "print('held', flush=True); time.sleep(120)", str(lock)],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = run_bench("-m", "hydra/sweeper=optuna", *TINY, f"output_root={tmp_path}",
                         "hydra.sweeper.seeds=1", "hydra.sweeper.n_trials=1", check=False)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stderr
    assert "study demo-tpo" in proc.stderr and f"pid {holder.pid}" in proc.stderr
    assert "is being run by another sweep" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / ".optuna" / "demo-tpo.db").exists()
    assert not list(tmp_path.rglob("summary.json"))


@pytest.mark.slow
def test_a_plugin_loss_edited_between_launches_is_not_silently_skipped(tmp_path):
    """As a user would: run, edit your plugin's loss, run again: refused naming both
    fingerprints; on_code_change=rerun trains it under the new code."""
    from conftest import run_bench, run_dirs
    from dev.faults import EDITS, PLUGIN
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "fault_plugin.py").write_text(PLUGIN)
    args = [*TINY, "algo.impl=tpo_fault", "plugins=[fault_plugin]", f"output_root={tmp_path / 'out'}"]
    env = {"PYTHONPATH": os.pathsep.join([str(plugin), os.environ.get("PYTHONPATH", "")])}
    run_bench(*args, env=env)
    [d] = run_dirs(tmp_path / "out")
    first = json.loads((d / "summary.json").read_text())
    assert str(plugin / "fault_plugin.py") in first["code_files"]
    old, new = EDITS["statement"]
    (plugin / "fault_plugin.py").write_text(PLUGIN.replace(old, new))
    proc = run_bench(*args, env=env, check=False)
    assert proc.returncode == 1 and "already completed" not in proc.stdout
    assert f"code fingerprint {first['code_fingerprint']}" in proc.stderr
    assert json.loads((d / "summary.json").read_text()) == first
    run_bench(*args, "on_code_change=rerun", env=env)
    again = json.loads((d / "summary.json").read_text())
    assert again["status"] == "completed" and again["code_fingerprint"] != first["code_fingerprint"]
