"""hydra/sweeper=optuna, end to end through real Hydra subprocesses."""
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, job_here, run_bench, run_dirs, train_here

optuna = pytest.importorskip("optuna")  # the `tune` extra (CI installs it with `test`)
from optuna.trial import TrialState  # noqa: E402

from hydra_plugins.bench_optuna import _space as S  # noqa: E402

TINY = ["task=demo", "task.episodes=2", "task.batch_size=4", "task.sequence_length=3",
        "threads=1", "log_every=100"]


def sweep(out, *args, check=True):
    return run_bench("-m", "hydra/sweeper=optuna", *TINY, f"output_root={out}",
                     "hydra.sweeper.seeds=2", *args, check=check)


def load(out, name="demo-tpo"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{out}/.optuna/{name}.db")


def counted(study):
    skip = set(study.user_attrs.get("interrupted", []))
    return [t for t in study.trials if t.state.is_finished() and t.number not in skip]


def last_error(run_dir):
    return pd.read_parquet(f"{run_dir}/metrics.parquet")["error"].iloc[-1]


@pytest.mark.slow
def test_study_resumes_without_rerunning_and_best_config_runs(out, tmp_path):
    first = sweep(out, "hydra.sweeper.n_trials=2")
    assert "2 trials x 2 seeds x 2 episodes = 8 episodes" in first.stdout  # the budget, printed
    study = load(out)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    dirs = run_dirs(out)
    assert len(dirs) == 4  # every seed of every trial is an ordinary run directory
    for t in study.trials:  # the value is the seed mean of the final error
        assert {d.rsplit("/", 1)[1] for d in t.user_attrs["run_dirs"]} == {"seed=0", "seed=1"}
        assert t.value == pytest.approx(sum(map(last_error, t.user_attrs["run_dirs"])) / 2)

    # A sweep killed mid-trial leaves it RUNNING: the next invocation records it as
    # interrupted (not counted) and runs its parameters again; its runs are complete, so
    # the runner skips them and nothing new appears.
    study.enqueue_trial(study.trials[0].params)
    stale = study.ask()
    S.suggest(stale, yaml.safe_load((REPO / "conf" / "tune" / "tpo.yaml").read_text()))
    assert stale.params == study.trials[0].params
    again = sweep(out, "hydra.sweeper.n_trials=3")
    study = load(out)
    assert study.user_attrs["interrupted"] == [stale.number]
    assert len(counted(study)) == 3 and again.stdout.count("[skip]") == 2
    assert run_dirs(out) == dirs

    # Same budget again: nothing to do, nothing runs.
    idle = sweep(out, "hydra.sweeper.n_trials=3")
    assert "(3/3)" not in idle.stdout and "[skip]" not in idle.stdout
    assert len(load(out).trials) == len(study.trials) and run_dirs(out) == dirs

    # A bigger budget adds exactly the missing trial, at new parameters (the resumed sampler
    # does not redraw the first points).
    sweep(out, "hydra.sweeper.n_trials=4")
    study = load(out)
    assert len(counted(study)) == 4 and len(run_dirs(out)) == len(dirs) + 2
    assert study.trials[-1].params != study.trials[0].params

    # A changed setup is refused instead of mixing incomparable trials.
    refused = sweep(out, "hydra.sweeper.n_trials=4", "hydra.sweeper.objective=auc", check=False)
    assert refused.returncode == 2 and "study_key" in refused.stderr

    # The best configuration is a ready-to-use conf/algo file: it runs as algo=tpo_tuned and
    # reproduces the best trial's seed-0 run.
    best = study.best_trial
    tuned = out / "tuned" / "demo-tpo" / "algo" / "tpo_tuned.yaml"
    assert "# @package _global_" in tuned.read_text()
    other = tmp_path / "rerun"
    assert train_here(job_here("algo=tpo_tuned", f"hydra.searchpath=[file://{out / 'tuned' / 'demo-tpo'}]",
                               *TINY, "seed=0", f"output_root={other}"))["status"] == "completed"
    [rerun] = run_dirs(other)
    config = json.loads((rerun / "config.json").read_text())
    assert config["algo"]["name"] == "tpo_tuned" and config["algo"]["impl"] == "tpo"
    assert config["optim"]["lr"] == best.params["optim.lr"]
    assert config["algo"]["k"] == best.params["algo.k"]
    seed0 = next(d for d in best.user_attrs["run_dirs"] if d.endswith("seed=0"))
    assert last_error(rerun) == last_error(seed0)


@pytest.mark.slow
def test_diverged_trial_is_pruned_and_failed_trials_fail(out, tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("optim.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
                     "algo.epochs: {type: categorical, choices: [1, 0]}\n"
                     "debug.nan_at: {type: categorical, choices: [-1, 0]}\n"
                     "debug.sleep: {type: categorical, choices: [0.0, -1.0]}\n")
    # Enqueued trials (distinct learning rates, so distinct run directories): NaN loss at
    # step 0; an exception inside the run (time.sleep(-1)); a config the runner refuses
    # (epochs 0: nothing launched); a healthy one.
    trials = [(0.001, 1, 0, 0.0), (0.002, 1, -1, -1.0), (0.003, 0, -1, 0.0), (0.004, 1, -1, 0.0)]
    enqueue = ",".join(f"{{optim.lr:{lr},algo.epochs:{ep},debug.nan_at:{nan},debug.sleep:{sl}}}"
                       for lr, ep, nan, sl in trials)
    proc = sweep(out, "hydra.sweeper.n_trials=4", f"hydra.sweeper.space_file={space}",
                 f"hydra.sweeper.enqueue=[{enqueue}]")
    study = load(out)
    assert [t.state for t in study.trials] == [TrialState.PRUNED, TrialState.FAIL,
                                                TrialState.FAIL, TrialState.COMPLETE]
    assert [t.user_attrs["outcome"] for t in study.trials] == ["diverged", "failed", "invalid", "complete"]
    assert "FloatingPointError" in study.trials[0].user_attrs["reasons"][0]
    assert "ValueError" in study.trials[1].user_attrs["reasons"][0]
    assert len(run_dirs(out)) == 6  # the refused trial launched nothing
    assert "PRUNED (diverged" in proc.stdout and "FAIL (invalid" in proc.stdout
    assert study.best_trial.number == 3 and (out / "tuned" / "demo-tpo" / "algo" / "tpo_tuned.yaml").is_file()

    # Study analysis: history plot always; importance refused politely with too few trials.
    # analysis/tuning/report.py's main, in process
    from tpo_bench.analysis.tuning import report

    assert report.main(["--storage", str(out / ".optuna"), "--out", str(tmp_path / "plots")]) == 0
    shown = capsys.readouterr().out
    assert "1 diverged, 1 failed, 1 invalid, 1 complete" in shown
    assert "needs 5 complete trials" in shown
    assert (tmp_path / "plots" / "demo-tpo_history.png").stat().st_size > 1000
    assert not (tmp_path / "plots" / "demo-tpo_importance.png").exists()


@pytest.mark.slow
def test_experiment_budgets_and_refusals(out):
    dry = run_bench("-m", "+experiment=tuned_terminal", f"output_root={out}", "dry_run=true")
    lines = [l for l in dry.stdout.splitlines() if l.startswith("[tune] study")]
    assert [l.split()[2].rstrip(":") for l in lines] == [f"reverse_h7-{a}-tuned_terminal" for a in ("tpo", "grpo", "ppo", "dg")]
    assert "the same budget each: 20 trials x 3 seeds x 300 episodes" in dry.stdout
    assert not out.exists()  # nothing created
    # A refusal through the command: exit 2, the reason on stderr, nothing created.
    proc = run_bench("-m", "hydra/sweeper=optuna", *TINY, "algo=grpo_no_kl", f"output_root={out}", check=False)
    assert proc.returncode == 2 and "no search space for algo 'grpo_no_kl'" in proc.stderr, proc.stderr
    assert not out.exists()


def test_swept_seeds_and_an_unknown_objective_are_refused():
    """The sweeper's other refusals before anything runs, in process: the Refused its
    sweep prints and exits 2 on, as for the missing search space above."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra_plugins.bench_optuna.optuna_sweeper import OptunaSweeper, Refused, refuse_seed_sweeps

    with pytest.raises(Refused, match="do not sweep them"):
        refuse_seed_sweeps(OverridesParser.create().parse_overrides([*TINY, "seed=0,1"]))
    refuse_seed_sweeps(OverridesParser.create().parse_overrides([*TINY, "seed=3"]))  # one seed: its first
    opts = yaml.safe_load((REPO / "conf" / "hydra" / "sweeper" / "optuna.yaml").read_text())
    opts.pop("_target_")
    with pytest.raises(Refused, match="objective='best'"):
        OptunaSweeper(**{**opts, "objective": "best"}).check_opts()
    OptunaSweeper(**opts).check_opts()  # the shipped options pass
    with pytest.raises(Refused, match="sampler.seed must be an integer"):
        OptunaSweeper(**{**opts, "sampler": {"n_startup_trials": 10}}).check_opts()
    with pytest.raises(Refused, match="sampler.seed must be an integer"):
        OptunaSweeper(**{**opts, "sampler": {"seed": True}}).check_opts()


def test_space_schema():
    good = {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "algo.k": {"type": "categorical", "choices": [4, 8]}}
    assert S.check_space(good, "x") == good
    for bad in ({"a": {"type": "float", "low": 1, "high": 1}},
                {"a": {"type": "int", "low": 0.5, "high": 2}},
                {"a": {"type": "float", "low": 0, "high": 1, "log": True}},
                {"a": {"type": "categorical", "choices": []}},
                {"a": {"type": "uniform", "low": 0, "high": 1}},
                {"a": {"type": "float", "low": 0, "high": 1, "lgo": True}}, {}):
        with pytest.raises(S.SpaceError):
            S.check_space(bad, "x")
    assert S.as_override("optim.lr", 1e-05) == "optim.lr=1e-05"
    assert S.as_override("algo.anchor", False) == "algo.anchor=false"


def _best_file(proc, study):
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"[tune] best of {study}:")]
    return line.rsplit(" -> ", 1)[1]


@pytest.mark.slow
def test_two_studies_of_one_algorithm_keep_a_tuned_preset_each(out):
    first = sweep(out, "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=1", "hydra.sweeper.study_key=a")
    mine = _best_file(first, "demo-tpo-a")
    second = sweep(out, "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=1", "hydra.sweeper.study_key=b",
                   "hydra.sweeper.sampler.seed=7")
    theirs = _best_file(second, "demo-tpo-b")
    assert mine != theirs
    text = open(mine).read()
    assert "optuna study demo-tpo-a" in text and "demo-tpo-b" not in text
    best = load(out, "demo-tpo-a").best_trial.params
    assert yaml.safe_load(text)["optim"]["lr"] == best["optim.lr"]
    # the printed rerun command loads each study's preset from that study's folder
    [rerun] = [ln for ln in first.stdout.splitlines() if "hydra.searchpath" in ln]
    assert str(Path(mine).parent.parent) in rerun


@pytest.mark.slow  # starts a process
def test_a_linked_study_database_is_refused_and_its_target_untouched(out, tmp_path):
    theirs = tmp_path / "theirs" / "other-study.db"
    theirs.parent.mkdir()
    theirs.write_bytes(b"another study's database")
    (out / ".optuna").mkdir(parents=True)
    (out / ".optuna" / "demo-tpo.db").symlink_to(theirs)
    proc = sweep(out, "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=1", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "demo-tpo.db is a symbolic link" in proc.stderr and "nothing was run" in proc.stderr
    assert theirs.read_bytes() == b"another study's database"
    assert not list(out.rglob("summary.json")) and not (out / ".optuna" / "demo-tpo.lock").exists()
