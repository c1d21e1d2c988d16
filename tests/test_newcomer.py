"""What a newcomer meets first, and bad values a launch must refuse before any training:
the version, a package of theirs that shadows the harness, a sweep's progress line after
refusals, a finished SLURM sweep, a logger added to a finished run, a rerun under new code,
an episode count no table holds, a tracker folder outside the run, an over-long root."""
import ast
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, TINY, bench_here, refuse_here, spec_for, train_here


# ------------------------------------------------------------------ refused at launch

def test_an_episode_count_no_table_holds_is_refused_at_launch(tmp_path):
    from tpo_bench.bench.build import ConfigError

    with pytest.raises(ConfigError, match=r"task\.episodes must be an integer from 1 to 100,000,000"):
        spec_for(tmp_path / "out", "task.episodes=1000000000000")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", ["demo", "tabular_single", "tabular_multi", "mnist"])
def test_every_task_takes_the_one_episode_rule(task, tmp_path):
    """One rule for every task's run length, whatever the task checks of its own fields."""
    for bad in ("0", "-3"):
        refused = refuse_here(f"task={task}", f"task.episodes={bad}", f"output_root={tmp_path}")
        assert refused.startswith(f"task.episodes must be an integer from 1 to 100,000,000"), refused
        assert refused.endswith(f"got {bad}"), refused


def test_a_bad_episode_count_anywhere_in_a_sweep_stops_it_before_any_run(tmp_path):
    proc = bench_here("-m", *TINY, "task.episodes=2,1000000000000", f"output_root={tmp_path / 'out'}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "task.episodes must be an integer" in proc.stderr and "nothing was launched" in proc.stderr
    assert not list((tmp_path / "out").rglob("seed=*"))


@pytest.mark.parametrize("subdir", ["../../x", "/tmp/x", "a/../../b", ""])
def test_a_tracker_folder_outside_the_run_is_refused(subdir):
    from tpo_bench.bench.build import ConfigError
    from tpo_bench.bench.tracking import logger_config

    with pytest.raises(ConfigError, match="logger.subdir=.* must be a folder inside the run directory"):
        logger_config({"name": "tensorboard", "subdir": subdir})
    assert logger_config({"name": "tensorboard", "subdir": "tb/events"})["subdir"] == "tb/events"


def test_an_over_long_output_root_is_refused_before_training(tmp_path):
    from tpo_bench.bench.build import ConfigError

    deep = tmp_path.joinpath(*["d" * 250] * 16)
    with pytest.raises(ConfigError, match=r"output_root is \d+ bytes long.*choose a shorter output_root"):
        spec_for(deep)
    with pytest.raises(ConfigError, match="output_root: the folder name d+... is 300 bytes"):
        spec_for(tmp_path / ("d" * 300))
    assert sorted(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ the version, a shadowing package

def test_the_installed_bench_entry_has_a_version():
    import tpo_bench
    import tpo_bench.entry  # what an install puts at the top-level name `bench`

    assert sys.modules["bench"].__version__ == tpo_bench.__version__ and tpo_bench.__version__


def test_bench_version_is_tpo_benchs_not_hydras():
    import tpo_bench

    proc = bench_here("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"tpo-bench {tpo_bench.__version__}", proc.stdout
    assert "Hydra" not in proc.stdout


@pytest.mark.slow  # starts a process
def test_a_users_tpo_bench_package_in_the_working_directory_is_named(tmp_path):
    (tmp_path / "tpo_bench").mkdir()
    (tmp_path / "tpo_bench" / "__init__.py").write_text("VERSION = 'mine'\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "bench", *TINY, f"output_root={tmp_path / 'out'}"],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"the tpo_bench this command imports is {tmp_path / 'tpo_bench'}, not tpo-bench's" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def shadow_checks() -> dict[str, ast.If]:
    """The "a user's own tpo_bench" block of each `bench` entry: a checkout's bench/ and an
    install's tpo_bench/entry/ (neither can import it from the package it guards)."""
    out = {}
    for rel in ("bench/__init__.py", "tpo_bench/entry/__init__.py"):
        found = [node for node in ast.walk(ast.parse((REPO / rel).read_text()))
                 if isinstance(node, ast.If) and ast.unparse(node.test) == "not hasattr(tpo_bench, 'alias')"]
        assert len(found) == 1, (rel, len(found))
        out[rel] = found[0]
    return out


def test_both_bench_entries_refuse_a_shadowing_tpo_bench_alike(tmp_path, capsys):
    """The two copies are one logic (the same syntax tree), and it names the shadowing
    folder and exits 2 while our own package passes through."""
    import types

    import tpo_bench

    checks = shadow_checks()
    assert len({ast.dump(node) for node in checks.values()}) == 1, \
        "bench/__init__.py and tpo_bench/entry/__init__.py check for a shadowing tpo_bench differently"
    mine = types.ModuleType("tpo_bench")
    mine.__path__ = [str(tmp_path / "tpo_bench")]
    for rel, node in checks.items():
        code = compile(ast.Module(body=[node], type_ignores=[]), rel, "exec")
        with pytest.raises(SystemExit) as stop:
            exec(code, {"tpo_bench": mine})
        assert stop.value.code == 2, rel
        assert f"the tpo_bench this command imports is {tmp_path / 'tpo_bench'}, not tpo-bench's" \
            in capsys.readouterr().err, rel
        exec(code, {"tpo_bench": tpo_bench})  # ours: nothing said, no exit
        assert capsys.readouterr().err == "", rel


def test_the_built_documentation_site_is_ignored():
    lines = {ln.strip() for ln in (REPO / ".gitignore").read_text().splitlines()}
    assert "site/" in lines  # mkdocs build writes the site there


# ------------------------------------------------------------------ a sweep's progress line

def test_refused_runs_that_were_complete_are_not_also_counted_done(tmp_path):
    """Six runs complete before the sweep, two of them refused by it (say, completed under
    other code): four are already complete, two refused, none waiting."""
    import io

    from hydra_plugins.bench_sweeper._progress import SweepProgress

    dirs = [tmp_path / f"seed={i}" for i in range(6)]
    for d in dirs:
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"status": "completed", "finished_at": 1.0}))
    out = io.StringIO()
    with SweepProgress(dirs, every_s=3600, force=False, stream=out) as progress:
        pass
    progress.finish({"refused": 2}, failed=[], untouched=[str(d) for d in dirs[:2]])
    last = out.getvalue().strip().splitlines()[-1]
    assert "4/6 runs done (0 completed, 4 already complete)" in last, last
    assert "2 refused, 0 waiting" in last, last


# ------------------------------------------------------------------ a finished SLURM sweep

@pytest.mark.slow  # trains, and runs the SLURM stand-ins
def test_a_finished_slurm_sweep_submits_nothing(tmp_path):
    out = tmp_path / "out"
    for seed in (0, 1):  # the runs of `-m seed=0,1`, trained here
        assert train_here(spec_for(out, f"seed={seed}"))["status"] == "completed"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "sbatch.log"
    for name, body in (("sbatch", f"echo \"$@\" >> {log}; exit 1"), ("srun", "exit 0"),
                       ("sinfo", "echo debug"), ("sacct", "exit 0")):
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    proc = bench_here("-m", *TINY, "seed=0,1", f"output_root={out}", "hydra/launcher=slurm_cpu",
                      env={"PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 of 2 job(s) already complete" in proc.stdout and "not submitted" in proc.stdout
    assert not log.exists()


# ------------------------------------------------------------------ a finished run, again

@pytest.mark.slow  # trains
def test_a_logger_added_to_a_completed_run_says_it_logs_nothing(tmp_path, capsys):
    spec = spec_for(tmp_path / "out")
    assert train_here(spec)["status"] == "completed"
    capsys.readouterr()
    again = dataclasses.replace(spec, logger={"name": "tensorboard", "subdir": "tensorboard"})
    assert train_here(again)["status"] == "completed"
    line = capsys.readouterr().out
    assert "[skip]" in line and "logger=tensorboard logs nothing for it" in line, line


@pytest.mark.slow  # trains
def test_on_code_change_rerun_keeps_the_old_result_as_a_prior_attempt(tmp_path):
    import pandas as pd

    spec = spec_for(tmp_path / "out")
    assert train_here(spec)["status"] == "completed"
    before = (spec.run_dir / "metrics.parquet").read_bytes()
    summary = (spec.run_dir / "summary.json").read_text()
    edited = dataclasses.replace(spec, code_fingerprint="0" * 16,
                                 run=dataclasses.replace(spec.run, on_code_change="rerun"))
    answer = train_here(edited)
    assert answer["status"] == "completed" and answer["attempts"] == 2, answer
    prior = spec.run_dir / "prior-attempt-1"
    assert (prior / "metrics.parquet").read_bytes() == before
    assert json.loads((prior / "summary.json").read_text()) == json.loads(summary)
    assert len(pd.read_parquet(spec.run_dir / "metrics.parquet")) == len(pd.read_parquet(prior / "metrics.parquet"))


@pytest.mark.slow  # trains
def test_a_rerun_under_edited_code_is_collected_and_drawn_beside_the_old_result(tmp_path, capsys):
    """A loss edited (TPO's eta quadrupled, the config unchanged) and its runs trained again
    with on_code_change=rerun: `collect --prior-attempts` keeps the old and the new result
    side by side, each line labelled by its code, and plot draws both; editing back to the
    first code adds no second copy of its result. Without the flag the table is today's."""
    import pandas as pd

    from tpo_bench.analysis import collect, plot

    root = tmp_path / "out"
    first = [spec_for(root, f"seed={s}") for s in (0, 1)]
    edited = [dataclasses.replace(s, algo=dataclasses.replace(s.algo, eta=4 * s.algo.eta),
                                  code_fingerprint="e" * 16,
                                  run=dataclasses.replace(s.run, on_code_change="rerun")) for s in first]
    curves = {}
    for specs in (first, edited):
        for spec in specs:
            assert train_here(spec)["status"] == "completed"
            curves[spec.code_fingerprint, spec.run.seed] = \
                pd.read_parquet(spec.run_dir / "metrics.parquet")["error"].tolist()
    old, new = first[0].code_fingerprint, "e" * 16
    assert curves[old, 0] != curves[new, 0]  # the edit changed the result
    assert "--prior-attempts" in capsys.readouterr().out  # the rerun says how to see both

    def table(*flags: str) -> pd.DataFrame:
        out = tmp_path / f"results{len(flags)}.parquet"
        assert collect.main([str(root), "--out", str(out), *flags]) == 0, capsys.readouterr()
        return pd.read_parquet(out)

    today = table()
    assert set(today["algo.name"]) == {"tpo"} and set(today["code_fingerprint"]) == {new}
    both = table("--prior-attempts")
    lines = {algo: {seed: g["error"].tolist() for seed, g in rows.groupby("seed")}
             for algo, rows in both.groupby("algo.name")}
    assert lines == {f"tpo [code {fp[:8]}]": {s: curves[fp, s] for s in (0, 1)} for fp in (old, new)}
    plots = tmp_path / "plots"
    capsys.readouterr()
    assert plot.main(["--results", str(tmp_path / "results1.parquet"), "--out", str(plots)]) == 0
    summary = capsys.readouterr().out
    assert f"tpo [code {old[:8]}]" in summary and f"tpo [code {new[:8]}]" in summary, summary
    assert (plots / "demo.png").is_file()

    for spec in first:  # the edit undone: today's code is the first again
        rerun = dataclasses.replace(spec, run=dataclasses.replace(spec.run, on_code_change="rerun"))
        assert train_here(rerun)["status"] == "completed"
    again = table("--prior-attempts")
    assert again.groupby(["algo.name", "seed"]).size().to_dict() == \
        both.groupby(["algo.name", "seed"]).size().to_dict()  # one result per code and seed
