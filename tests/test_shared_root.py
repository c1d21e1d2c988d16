"""An output root shared with other users: links and runs they planted, tables merged at
once, what the code fingerprint covers. What the harness does with each: refuse it, name
it, and touch nothing it did not create."""
import json
import os
from pathlib import Path

import pytest

from conftest import TINY, run_bench, spec_for, train_here


# ------------------------------------------------------------------ Hydra's sweep files

def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "theirs" / "private.yaml"
    victim.parent.mkdir()
    victim.write_text("their own file\n")
    victim.chmod(0o600)
    return victim


@pytest.mark.slow  # starts a process
def test_a_link_planted_at_the_next_sweeps_multirun_yaml_is_not_written_through(tmp_path):
    root, victim = tmp_path / "out", _victim(tmp_path)
    sweep = root / ".hydra" / "multirun" / "next"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").symlink_to(victim)
    run_bench("-m", *TINY, "task.episodes=1", f"output_root={root}", "seed=1",
              f"hydra.sweep.dir={sweep}")
    assert victim.read_text() == "their own file\n"
    written = sweep / "multirun.yaml"
    assert not written.is_symlink() and "output_root" in written.read_text()


@pytest.mark.slow  # starts a process
def test_a_linked_folder_on_the_way_to_the_sweep_dir_is_refused(tmp_path):
    root, victim = tmp_path / "out", _victim(tmp_path)
    (root / ".hydra").mkdir(parents=True)
    (root / ".hydra" / "multirun").symlink_to(victim.parent, target_is_directory=True)
    proc = run_bench("-m", *TINY, "task.episodes=1", f"output_root={root}", "seed=1",
                     f"hydra.sweep.dir={root}/.hydra/multirun/next", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "hydra.sweep.dir" in proc.stderr and "multirun is a symbolic link" in proc.stderr
    assert sorted(p.name for p in victim.parent.iterdir()) == ["private.yaml"]
    assert not list(root.rglob("seed=*"))  # refused before any run started


# Every sweep's clock in one second, its microseconds its own: two sweeps started at once.
SAME_SECOND = """import datetime, runpy
import hydra.core.utils


class SameSecond(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2030, 1, 1, 12, 0, 0, datetime.datetime.now().microsecond)


hydra.core.utils.datetime = SameSecond
runpy.run_module("bench", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow  # starts processes
def test_two_sweeps_started_in_one_second_on_one_root_keep_their_own_folders(tmp_path):
    """Each sweep's multirun.yaml (and its STOP file) in a folder of its own, not one
    sweep's replacing the other's."""
    import subprocess
    import sys

    import yaml

    from conftest import REPO

    root = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-c", SAME_SECOND, "-m", *TINY, "task.episodes=1",
                               f"seed={seed}", f"output_root={root}"], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for seed in (1, 2)]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    sweeps = sorted((root / ".hydra" / "multirun").iterdir())
    assert [d.name[:19] for d in sweeps] == ["2030-01-01_12-00-00"] * 2
    told = sorted(yaml.safe_load((d / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
                  for d in sweeps)
    assert [[o for o in t if o.startswith("seed=")] for t in told] == [["seed=1"], ["seed=2"]]


# ------------------------------------------------------------------ planted runs





def _collect(root: Path, tmp_path: Path, capsys, *flags):
    from tpo_bench.analysis import collect
    import pandas as pd

    out = tmp_path / "results.parquet"
    capsys.readouterr()  # the runs' own lines
    rc = collect.main([str(root), "--out", str(out), *flags])
    text = capsys.readouterr()
    return rc, text.out + text.err, (pd.read_parquet(out) if out.exists() else None)


@pytest.mark.slow  # starts a process
def test_a_completed_run_planted_under_other_names_is_neither_skipped_to_nor_pooled(tmp_path, capsys):
    root = tmp_path / "out"
    real = spec_for(root, "seed=5")
    assert train_here(real)["status"] == "completed"
    planted = root / "zz" / "zz" / real.config_hash / "seed=5"
    planted.parent.mkdir(parents=True)
    real.run_dir.rename(planted)
    spec = spec_for(root, "seed=5")
    assert spec.run_dir == real.run_dir  # found only where its own files say it belongs
    answer = train_here(spec)
    assert answer["status"] == "completed" and answer["run_dir"] == str(real.run_dir)
    assert answer["attempts"] == 1  # trained, not skipped to the copy
    rc, text, table = _collect(root, tmp_path, capsys)
    assert rc == 1 and table is None, text
    [line] = [ln for ln in text.splitlines() if "zz/zz" in ln]
    assert "inconsistent" in line and "metrics.parquet says task.name demo, its path says zz" in line
    assert "summary.json says algo tpo, its path says zz" in line, line
    rc, text, table = _collect(root, tmp_path, capsys, "--allow-skips")
    assert rc == 0 and table.groupby(["config_hash", "seed"]).ngroups == 1
    assert "collected 1 runs" in text


@pytest.mark.slow  # starts a process
def test_a_completed_run_copied_into_another_configs_folder_is_refused(tmp_path, capsys):
    import shutil

    root = tmp_path / "out"
    theirs = spec_for(root, "seed=1", "optim.lr=0.002")
    assert train_here(theirs)["status"] == "completed"
    ours = spec_for(root, "seed=1", "optim.lr=0.003")
    assert ours.config_hash != theirs.config_hash
    shutil.copytree(theirs.run_dir, ours.run_dir)
    before = {p.name: p.read_bytes() for p in ours.run_dir.iterdir() if p.is_file()}
    answer = train_here(ours)
    assert answer["status"] == "refused", answer
    assert f"config.json hashes to {theirs.config_hash}, its folder is {ours.config_hash}" \
        in answer["reason"]
    assert {p.name: p.read_bytes() for p in ours.run_dir.iterdir() if p.is_file()} == before
    rc, text, _ = _collect(root, tmp_path, capsys)
    assert rc == 1 and f"config.json hashes to {theirs.config_hash}" in text, text


# ------------------------------------------------------------------ merges at once

SLOW_MERGE = ("import sys, time\n"
              "from tpo_bench.analysis import collect\n"
              "merge = collect.merge\n"
              "def slow(existing, new):\n"
              "    out = merge(existing, new)\n"
              "    time.sleep(2.0)  # read the table, computed the merge, not yet written\n"
              "    return out\n"
              "collect.merge = slow\n"
              "sys.exit(collect.main(sys.argv[1:]))\n")


@pytest.mark.slow  # starts a process
def test_two_merges_into_one_table_at_once_keep_every_run(tmp_path):
    import subprocess
    import sys

    import numpy as np
    import pandas as pd

    from conftest import REPO
    from tpo_bench.analysis import collect
    from dev.bench_collect import demo_config, write_run

    roots = []
    for i, seeds in enumerate(((0,), (0, 1), (0, 1, 2))):
        roots.append(tmp_path / f"root{i}")
        for s in seeds:
            write_run(roots[-1], demo_config(3, 1e-3 * (i + 1)), s, np.linspace(0.9, 0.1, 3))
    table = tmp_path / "table.parquet"
    assert collect.main([str(roots[0]), "--out", str(table)]) == 0
    procs = [subprocess.Popen([sys.executable, "-c", SLOW_MERGE, str(r), "--merge-into", str(table)],
                              cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in roots[1:]]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    merged = pd.read_parquet(table)
    assert merged.groupby(["config_hash", "seed"]).ngroups == 1 + 2 + 3, outs
    assert any("waiting for the merge into" in err for _, err in outs), outs


# ------------------------------------------------------------------ a task's padded log-probs

@pytest.mark.parametrize("preset", ["grpo", "grpo_masked", "grpo_no_kl", "gspo", "tpo"])
def test_junk_in_a_tasks_padded_log_probs_is_refused_not_trained_on(preset):
    import dataclasses

    import torch

    from conftest import compose
    from tpo_bench.algorithms import ALGORITHMS
    from tpo_bench.bench.engine import backward
    from tpo_bench.contract.batch import Batch, TaskOptions

    section = compose(f"algo={preset}")["algo"]
    cls = ALGORITHMS.get(section.pop("impl", None) or section["name"])
    algo = cls(**{k: v for k, v in section.items() if k in {f.name for f in dataclasses.fields(cls)}})
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 4, 3, dtype=torch.bool)
    mask[:, 1, 2] = mask[1, 3, 1:] = False
    logp_old = -torch.rand(2, 4, 3, generator=g) * mask
    rewards = torch.rand(2, 4, 3, generator=g) * mask
    batch = Batch.sampled_group(logp_old, rewards, rewards.sum(-1) > 1.0, mask=mask)
    policy = torch.nn.Linear(1, 1)

    class Task(TaskOptions):
        junk = 0.0

        def logprobs(self, policy, part):
            shift = policy.weight.sum() * 0.01
            return (part.logp_old + shift * part.mask).masked_fill(~part.mask, self.junk)

    task = Task()
    loss, _ = backward(task, algo, [policy], [batch], 0.0)  # zeros at the padding: trained
    assert abs(loss) < 100
    task.junk = 1e9
    policy.zero_grad()
    with pytest.raises(ValueError, match="task.logprobs returned non-zero log-probs at padded steps"):
        backward(task, algo, [policy], [batch], 0.0)


# ------------------------------------------------------------------ what the fingerprint covers

PKG_LOSS = '''from dataclasses import dataclass

from tpo_bench.algorithms.tpo import TPO

from .helpers import scale


@dataclass(frozen=True)
class Scaled(TPO):
    def loss(self, batch, logp):
        out = super().loss(batch, logp)
        return type(out)(out.loss * scale(), out.metrics)
'''


def test_a_helper_module_of_the_plugins_package_is_fingerprinted(tmp_path, monkeypatch):
    import importlib

    from tpo_bench.bench.fingerprint import code_fingerprint

    pkg = tmp_path / "fp_pkg_scaled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "loss.py").write_text(PKG_LOSS)
    helper = pkg / "helpers.py"
    helper.write_text("def scale():\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = importlib.import_module("fp_pkg_scaled.loss").Scaled
    first, files = code_fingerprint(cls)
    assert str(helper) in files and "algorithms/tpo.py" in files
    assert not any("site-packages" in f for f in files)
    helper.write_text("def scale():\n    return 1e-9\n")
    os.utime(helper, ns=(1, 1))  # another file state than the cached one
    assert code_fingerprint(cls)[0] != first


def test_the_harness_a_run_executes_is_fingerprinted(tmp_path, monkeypatch):
    """bench/optim.py (say, the learning rate scaled by 1e-9) counts: a copy of it stands
    in for the real file, edited."""
    import shutil

    from tpo_bench.bench import fingerprint

    real = Path(fingerprint.__file__).parent / "optim.py"
    copy = tmp_path / "optim.py"
    shutil.copy(real, copy)
    real_origin = fingerprint.origin
    monkeypatch.setattr(fingerprint, "origin",
                        lambda m: copy if m == "tpo_bench.bench.optim" else real_origin(m))
    first = spec_for(tmp_path / "out").code_fingerprint
    text = copy.read_text()
    assert "lr" in text
    copy.write_text(text + "\n\ndef _scaled(lr):\n    return lr * 1e-9\n")
    os.utime(copy, ns=(1, 1))
    assert spec_for(tmp_path / "out").code_fingerprint != first


def test_a_module_dropped_into_algorithms_is_fingerprinted(tmp_path, monkeypatch):
    """algorithms/ imports every module in its folder, so a module it does not ship runs
    in every run (it may patch any loss): it counts in every run's fingerprint, edits
    included. A folder added to the package's path stands in for the real one."""
    from tpo_bench import algorithms

    first = spec_for(tmp_path / "out").code_fingerprint
    more = tmp_path / "more"
    more.mkdir()
    (more / "zz_local.py").write_text("SCALE = 1.0\n")
    monkeypatch.setattr(algorithms, "__path__", [*algorithms.__path__, str(more)])
    dropped = spec_for(tmp_path / "out")
    assert dropped.code_fingerprint != first
    assert any(f.endswith("zz_local.py") for f in dropped.code_files)
    (more / "zz_local.py").write_text("SCALE = 0.0\n")
    os.utime(more / "zz_local.py", ns=(1, 1))
    assert spec_for(tmp_path / "out").code_fingerprint not in (first, dropped.code_fingerprint)


@pytest.mark.slow  # starts a process
def test_a_run_recorded_before_the_wider_fingerprint_is_still_skipped(tmp_path, capsys):
    spec = spec_for(tmp_path / "out")
    assert train_here(spec)["status"] == "completed"
    path = spec.run_dir / "summary.json"
    s = json.loads(path.read_text())
    assert s["code_scope"] and s["code_fingerprint"] == spec.code_fingerprint
    del s["code_scope"]
    path.write_text(json.dumps({**s, "code_fingerprint": spec.narrow_fingerprint}))
    again = train_here(spec_for(tmp_path / "out"))
    assert again["status"] == "completed" and "already completed" in capsys.readouterr().out
    path.write_text(json.dumps({**s, "code_fingerprint": "0123456789abcdef"}))
    assert train_here(spec_for(tmp_path / "out"))["status"] == "refused"


# ------------------------------------------------------------------ resume under other code

def _unfinished_under_other_code(root: Path) -> Path:
    """A run that stopped at step 2 with its checkpoint (a NaN there), its record then
    saying it ran under other code."""
    spec = spec_for(root, "checkpoint_every=1", "debug.nan_at=2")
    assert train_here(spec)["status"] == "failed"
    assert (spec.run_dir / "checkpoint.pt").exists()
    path = spec.run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "code_fingerprint": "0123456789abcdef"}))
    return spec.run_dir


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("choice", ["refuse", "rerun", "keep"])
def test_on_code_change_applies_at_resume_too(tmp_path, capsys, choice):
    d = _unfinished_under_other_code(tmp_path / "out")
    files = lambda: {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and p.name != ".lock"}
    before = files()
    capsys.readouterr()
    answer = train_here(spec_for(tmp_path / "out", "checkpoint_every=1", f"on_code_change={choice}"))
    out = capsys.readouterr()
    if choice == "refuse":
        assert answer["status"] == "refused", answer
        assert "0123456789abcdef" in answer["reason"] and "on_code_change=keep" in answer["reason"]
        assert files() == before
        return
    assert answer["status"] == "completed"
    if choice == "rerun":
        assert "resumed from checkpoint" not in out.out and "started again" in out.out
    else:
        assert "resumed from checkpoint at step 2" in out.out
        assert "resumed under today's code (on_code_change=keep)" in out.out


# ------------------------------------------------------------------ edited tables

@pytest.mark.parametrize("col,value", [("optim.lr", 0.5), ("task.episodes", 99)])
def test_a_config_column_edited_in_a_runs_table_is_inconsistent(tmp_path, capsys, col, value):
    import numpy as np
    import pandas as pd

    from dev.bench_collect import demo_config, write_run

    root = tmp_path / "out"
    config = demo_config(3, 1e-3)
    runs = [write_run(root, config, s, np.linspace(0.9, 0.1, 3)) for s in (0, 1)]
    df = pd.read_parquet(runs[1] / "metrics.parquet")
    want = df[col].iloc[0]
    df[col] = value
    df.to_parquet(runs[1] / "metrics.parquet", index=False)
    rc, text, table = _collect(root, tmp_path, capsys)
    assert rc == 1 and table is None, text
    [line] = [ln for ln in text.splitlines() if "seed=1" in ln]
    assert f"metrics.parquet says {col} {value}, config.json {want}" in line, line


# ------------------------------------------------------------------ another user's unreadable runs

@pytest.mark.parametrize("where", ["run folder", "config folder"])
def test_a_teammates_unreadable_run_is_named_and_left_out(tmp_path, capsys, monkeypatch, where):
    """As root cannot be refused a folder, the OS's answer for a folder made with umask 077
    is played by the calls that meet it."""
    import errno
    import pathlib

    import numpy as np

    from tpo_bench.contract import schema
    from dev.bench_collect import demo_config, write_run

    root = tmp_path / "out"
    mine = write_run(root, demo_config(3, 1e-3), 0, np.linspace(0.9, 0.1, 3))
    theirs = write_run(root, demo_config(3, 2e-3), 1, np.linspace(0.9, 0.1, 3))
    denied = theirs if where == "run folder" else theirs.parent
    if where == "run folder":
        is_file = pathlib.Path.is_file

        def guarded(self):
            if self.parent == denied:
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return is_file(self)
        monkeypatch.setattr(pathlib.Path, "is_file", guarded)
    else:
        scandir = schema.os.scandir

        def guarded(path):
            if pathlib.Path(path) == denied:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return scandir(path)
        monkeypatch.setattr(schema.os, "scandir", guarded)
    rc, text, table = _collect(root, tmp_path, capsys)
    assert rc == 0, text
    assert table["seed"].unique().tolist() == [mine and 0]
    [line] = [ln for ln in text.splitlines() if str(denied.relative_to(root)) in ln and "skipped" in ln]
    assert "unreadable (Permission denied" in line and "chmod" in line, line
    assert "1 unreadable" in text


# ------------------------------------------------------------------ a table's claims

@pytest.mark.parametrize("episodes", [1e12, float("inf")])
def test_a_huge_episode_count_claimed_by_a_table_is_named_not_allocated(tmp_path, capsys, episodes):
    import numpy as np
    import pandas as pd

    from dev.bench_collect import demo_config, write_run

    root = tmp_path / "out"
    runs = [write_run(root, demo_config(3, 1e-3), s, np.linspace(0.9, 0.1, 3)) for s in (0, 1)]
    df = pd.read_parquet(runs[1] / "metrics.parquet")
    df["task.episodes"] = episodes
    df.to_parquet(runs[1] / "metrics.parquet", index=False)
    rc, text, table = _collect(root, tmp_path, capsys)
    assert rc == 1 and table is None, text
    [line] = [ln for ln in text.splitlines() if "seed=1" in ln]
    assert "inconsistent" in line and f"task.episodes {episodes}" in line, line
    rc, text, table = _collect(root, tmp_path, capsys, "--allow-skips")
    assert rc == 0 and table["seed"].unique().tolist() == [0]


# ------------------------------------------------------------------ a sweep checked whole

@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("seeds,by_job", [
    ("seed=1,99999999999999999999", False),  # the command line's check, before Hydra composes
    ("+hydra.sweeper.params.seed='1,99999999999999999999'", True),  # the sweeper's, job by job
])
def test_a_seed_past_64_bits_anywhere_in_a_sweep_stops_it_before_any_run(tmp_path, seeds, by_job):
    root = tmp_path / "out"
    proc = run_bench("-m", *TINY, f"output_root={root}", seeds, check=False)
    assert not list(root.rglob("seed=*")), proc.stdout  # seed 1 did not train first
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "seed must be an integer from 0 to 9223372036854775807" in proc.stderr
    assert "99999999999999999999" in proc.stderr
    assert ("(in job: seed=99999999999999999999" in proc.stderr) == by_job, proc.stderr
    assert ("nothing was launched" in proc.stderr) == by_job, proc.stderr


@pytest.mark.parametrize("value", [float("inf"), -float("inf")])
def test_an_infinite_error_edited_into_a_completed_run_is_inconsistent(tmp_path, capsys, value):
    import numpy as np

    from dev.bench_collect import demo_config, write_run

    root = tmp_path / "out"
    write_run(root, demo_config(3, 1e-3), 0, np.linspace(0.9, 0.1, 3))
    write_run(root, demo_config(3, 1e-3), 1, [0.9, value, 0.1])
    rc, text, table = _collect(root, tmp_path, capsys)
    assert rc == 1 and table is None, text
    [line] = [ln for ln in text.splitlines() if "seed=1" in ln]
    assert f"1 infinite error value ({value})" in line, line
