"""`python -m bench` end to end, through real Hydra: real subprocesses for what trains,
the entry run in this process (bench_here) for what stops before training (help, config,
refusals, dry runs)."""
import json
import re
import textwrap

import pandas as pd
import pytest

from conftest import PRESET_JOBS, REPO, TINY, bench_here, run_bench, run_dirs, run_script


@pytest.mark.slow  # takes seconds in process
def test_help_and_cfg_job():
    helped = bench_here("--help")
    assert helped.returncode == 0, helped.stderr
    assert "algo: " in helped.stdout and "tpo" in helped.stdout and "task: " in helped.stdout
    # the launchers are listed (Hydra hides them under --hydra-help), the tune folder is not a group
    lines = helped.stdout.splitlines()
    [launchers] = [line for line in lines if line.startswith("hydra/launcher")]
    presets = {p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml")}
    assert presets | {"submitit_slurm"} <= set(re.split(r"[:,]\s*", launchers)[1:])
    assert any(line.startswith("hydra/sweeper") and "optuna" in line for line in lines)
    assert not any(line.startswith("tune:") for line in lines)
    job = bench_here("--cfg", "job", "algo=grpo", "task=reverse_h10")
    assert job.returncode == 0, job.stderr
    assert "name: grpo" in job.stdout and "sequence_length: 10" in job.stdout
    assert "kl_coef: 0.04" in job.stdout


@pytest.mark.slow
def test_multirun_to_parquet_collect_and_plot(out):
    proc = run_bench("-m", "algo=tpo,pg", "seed=0,1", *TINY, f"output_root={out}")
    dirs = run_dirs(out)
    assert len(dirs) == 4
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["rows"] == 3
        assert summary["versions"]["torch"] and "final" in summary
        df = pd.read_parquet(d / "metrics.parquet")
        assert list(df["step"]) == [0, 1, 2]
        assert df["error"].between(0, 1).all()
        assert (df["config_hash"] == summary["config_hash"]).all()
        assert {"task.name", "algo.name", "algo.k", "optim.lr", "task.vocab_size"} <= set(df.columns)
        assert df["rollouts"].is_monotonic_increasing
        assert d.parent.name == summary["config_hash"]  # <root>/<task>/<algo>/<hash>/seed=n
        assert d.parent.parent.name == df["algo.name"].iloc[0]
    # the progress line a person follows in a log file
    assert "step 3/3 error" in proc.stdout and "ep/s" in proc.stdout and "ETA" in proc.stdout
    tpo = pd.read_parquet(next(d for d in dirs if "/tpo/" in str(d)) / "metrics.parquet")
    # TPO's target mass on successes is recorded wherever an episode had a success (NaN
    # exactly where none did), and these tiny runs have some; q is a probability
    assert (tpo["q_success"].isna() == (tpo["success_prompt_frac"] == 0)).all()
    assert tpo["q_success"].notna().any() and tpo["q_fail"].notna().all()
    assert tpo[["q_success", "q_fail"]].stack().dropna().between(0, 1, inclusive="neither").all()
    assert tpo["all_fail_frac"].notna().all() and tpo["grad_norm"].gt(0).all()
    pg = pd.read_parquet(next(d for d in dirs if "/pg/" in str(d)) / "metrics.parquet")
    assert pg["all_fail_frac"].isna().all()  # undefined for single samples (science §Measurement)

    results = out / "results.parquet"
    run_script("analysis/collect.py", str(out), "--out", str(results))
    table = pd.read_parquet(results)
    assert len(table) == 4 * 3 and set(table["algo.name"]) == {"tpo", "pg"}
    plots = out / "plots"
    shown = run_script("analysis/plot.py", "--results", str(results), "--out", str(plots))
    pngs = list(plots.glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
    assert list(plots.glob("*.pdf"))
    assert "tpo" in shown.stdout and "pg" in shown.stdout


# Two configs (algo.k) by two seeds, seed 1 first: each config's seed 0 is the second
# job of its config, after a run of the same config in the same process.
SWEPT = ["-m", "algo=tpo", "algo.k=2,4", "seed=1,0", *TINY]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("swept") / "outputs"
    run_bench(*SWEPT, f"output_root={out}")
    return out


@pytest.mark.slow
def test_seed_alone_equals_seed_as_second_job(swept, tmp_path):
    run_bench("seed=0", "algo.k=2", *TINY, f"output_root={tmp_path / 'a'}")
    [alone] = [d for d in run_dirs(tmp_path / "a")]
    [second] = [d for d in run_dirs(swept) if d.name == "seed=0" and d.parent.name == alone.parent.name]
    a = pd.read_parquet(alone / "metrics.parquet").drop(columns=["wall_s"])
    b = pd.read_parquet(second / "metrics.parquet").drop(columns=["wall_s"])
    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.slow
def test_run_identity_separates_configs_not_seeds(swept):
    dirs = run_dirs(swept)
    hashes = {d.parent.name for d in dirs}
    assert len(dirs) == 4 and len(hashes) == 2
    for h in hashes:
        assert {d.name for d in dirs if d.parent.name == h} == {"seed=0", "seed=1"}
    # same command again, -m last (anywhere on the line): nothing re-runs, nothing new appears
    again = run_bench(*SWEPT[1:], f"output_root={swept}", "-m")
    assert again.stdout.count("[skip]") == 4 and run_dirs(swept) == dirs


TOY_ALGO = '''
from dataclasses import dataclass
import torch
from tpo_bench.algorithms import register
from tpo_bench.contract.batch import Batch, LossOut

@register("toy_algo")
@dataclass(frozen=True)
class Toy:
    k: int = 3
    epochs: int = 2
    level: str = "sequence"
    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        w = batch.scores - batch.scores.mean(-1, keepdim=True)
        return LossOut(-(w * logp.sum(-1)).mean(), {})
'''

TOY_TASK = '''
from dataclasses import dataclass
import torch
from tpo_bench.contract.batch import Batch, Rollout
from tpo_bench.tasks import register

@register("toy_task")
@dataclass(frozen=True)
class ToyTask:
    """A 4-armed bandit: arm 2 pays."""
    name: str = "toy_task"
    episodes: int = 5
    arms: int = 4
    def check_algorithm(self, request): pass
    def make_policy(self, gen):
        return torch.nn.Linear(1, self.arms)
    def rollout(self, policy, request, streams):
        k = request.k
        logp = torch.log_softmax(policy.weight.detach().T, -1).expand(8, -1)
        a = torch.multinomial(logp.exp(), k, replacement=True, generator=streams.action)
        r = (a == 2).float()
        b = Batch.sampled_group(logp.gather(1, a), r, r > 0, obs=a)  # 8 contexts, k arms each
        return Rollout(b, error=1 - float(r.mean()), reward_mean=float(r.mean()), rollouts=a.numel())
    def logprobs(self, policy, batch):
        return torch.log_softmax(policy.weight.T, -1).expand(8, -1).gather(1, batch.obs).unsqueeze(-1)
    def evaluate(self, policy): return None
'''


@pytest.mark.slow
def test_plugin_algorithm_and_task_from_own_package(tmp_path, out):
    pkg = tmp_path / "myplugins"
    (pkg / "conf" / "algo").mkdir(parents=True)
    (pkg / "conf" / "task").mkdir(parents=True)
    (pkg / "toy_algo.py").write_text(textwrap.dedent(TOY_ALGO))
    (pkg / "toy_task.py").write_text(textwrap.dedent(TOY_TASK))
    (pkg / "conf" / "algo" / "toy_algo.yaml").write_text("name: toy_algo\nk: 3\n")
    (pkg / "conf" / "task" / "toy_task.yaml").write_text("name: toy_task\nepisodes: 4\n")
    proc = run_bench("algo=toy_algo", "task=toy_task", "optim=adam", "plugins=[toy_algo,toy_task]",
                     f"hydra.searchpath=[file://{pkg / 'conf'}]", f"output_root={out}",
                     env={"PYTHONPATH": str(pkg)})
    [d] = run_dirs(out)
    assert d.parent.parent.name == "toy_algo" and d.parent.parent.parent.name == "toy_task"
    df = pd.read_parquet(d / "metrics.parquet")
    assert len(df) == 4 and (df["algo.k"] == 3).all() and (df["rollouts"].diff().dropna() == 24).all()
    assert "step 4/4" in proc.stdout


@pytest.mark.parametrize("args,message", [
    (["algo=nope"], "algo=nope: no such algorithm; valid choices: ce, cispo"),
    (["algo.name=nope"], "registered algorithms: ce, cispo, clipped, dg, gpg, grpo, lpo"),
    (["task.impl=nope"], "registered tasks:"),
    (["+algo.bogus=1"], "unknown key algo.bogus for algorithm 'tpo'; valid keys: anchor, epochs, eta, k"),
    (["algo.k=1"], "algo.k=1: tpo is a grouped method"),
    (["algo=dg", "algo.k=8"], "algo.k=8: dg is a single-sample method"),
    (["algo.epochs=0"], "algo.epochs must be a positive integer"),
    (["task.batch_size=0"], "task.batch_size must be a positive integer"),
    (["task.reward=dense"], "task.reward='dense' is not one of bag_of_tokens, sequential, terminal"),
    (["optim.lr=-1"], "optim.lr must be a positive number"),
    (["optim=sgd"], "optim/sgd"),
    (["algo.eta=abc"], "algo.eta='abc' should be of type float"),
])
def test_bad_input_is_refused_before_any_run_dir(args, message, out):
    proc = bench_here(*TINY, *args, f"output_root={out}")
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
    assert run_dirs(out) == []


@pytest.mark.parametrize("experiment,jobs", sorted(PRESET_JOBS.items()))
@pytest.mark.slow  # a dry run validates every job: hundreds of configs built
@pytest.mark.filterwarnings("ignore:dg with algo.epochs")  # the dg_epochs presets' subject
def test_experiment_presets_compose_and_validate(experiment, jobs, tmp_path):
    """Every job of every paper preset composes and passes validation (dry run)."""
    proc = bench_here("-m", f"+experiment={experiment}", "dry_run=true", f"output_root={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    assert f"[dry run] {jobs} valid jobs" in proc.stdout
    assert not any(tmp_path.iterdir())  # nothing launched, nothing written


@pytest.mark.slow  # a dry run of a whole preset
def test_experiment_shrinks_with_one_override(tmp_path):
    proc = bench_here("-m", "+experiment=terminal_h_sweep", "seeds=2", "dry_run=true",
                      f"output_root={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    # 4 H x 2 seeds x (3 grouped methods once + PPO and DG under both matchings)
    assert "[dry run] 56 valid jobs" in proc.stdout and "match=interactions" in proc.stdout
    assert "24 job(s) are the same run as another job" in proc.stdout


@pytest.mark.slow
def test_jobs_resolving_to_one_run_are_launched_once(tmp_path):
    """match=interactions of a grouped method is its prompt-matched run: a sweep over both
    trains it once (two processes must never share a run directory) and still runs the
    single-sample method under both matchings."""
    proc = run_bench("-m", "task=demo", "algo=tpo,dg", "match=prompts,interactions", "seed=0",
                     "task.episodes=3", f"output_root={tmp_path}")
    assert "[sweep] 3 jobs, 3 runs: 3 completed, 0 failed" in proc.stdout
    dirs = run_dirs(tmp_path)
    assert len(dirs) == 3 and sum("/tpo/" in str(d) for d in dirs) == 1
