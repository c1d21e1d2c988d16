"""One forward path: a single run is the seed batch at S = 1 (bench.engine, each task's
forward written over a seed axis). A single run reproduces a committed run's first
episodes; batch_seeds=true trains a job's seeds as one stacked computation, and each
seed must be exactly its single run (on the CPU, one thread: bit for bit), write its own
directory, resume and be skipped like one."""
import dataclasses
import importlib.util
import math
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from tpo_bench.bench import engine, interrupts, rundir, runner
from tpo_bench.bench.build import build
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.bench.engine import train_episode
from tpo_bench.bench.config import compose
from tpo_bench.bench.jobs import explicit_keys, job_specs
from conftest import REPO, TINY, metrics, refuse_here, run_bench, run_dirs, summary, train_here, wait_for
from tpo_bench.contract.rng import Streams
from test_data import make_mnist
from dev.same_metrics import differences

pytestmark = pytest.mark.usefixtures("one_thread")  # bit-for-bit claims

# Odd sizes (B 5, H 3, V 3): every per-seed tensor off the SIMD width, where a stacked
# elementwise op or reduction would show a different rounding if it had one.
SMALL = ["task=demo", "task.batch_size=5", "task.sequence_length=3", "task.vocab_size=3", "threads=1"]
# Every preset in conf/algo/ but ce (a labelled task's: the bandits below cover it).
ALGOS = sorted(p.stem for p in (REPO / "conf" / "algo").glob("*.yaml") if p.stem != "ce")
SEEDS = 3
EPISODES = 3


def _seats(spec, seeds):
    streams = [Streams.from_seed(s) for s in seeds]
    policies = [spec.task.make_policy(st.init) for st in streams]
    opts = [build_optimizer(spec.optim_name, list(p.parameters()), **spec.optim_hparams) for p in policies]
    return streams, policies, opts


def _same_row(a: dict, b: dict) -> bool:
    """Bit for bit: NaN for NaN, and 0.0 is not -0.0."""
    return a.keys() == b.keys() and all(
        (x == y and (not isinstance(x, float) or math.copysign(1, x) == math.copysign(1, y))) or
        (isinstance(x, float) and math.isnan(x) and math.isnan(y)) for x, y in zip(a.values(), b.values()))


def _batched_vs_single(spec, seeds, episodes=EPISODES, mutate=None):
    """(single rows, batched rows, single seats, batched seats) after `episodes`."""
    single, stacked = _seats(spec, seeds), _seats(spec, seeds)
    rows_single = [[train_episode(spec.task, spec.algo, spec.request, p, o, st)
                    for st, p, o in zip(*single)] for _ in range(episodes)]
    rows_batched = []
    for _ in range(episodes):
        streams, policies, opts = stacked
        if mutate is not None:
            streams, policies, opts = mutate(streams, policies, opts)
        rows_batched.append(engine.train_episodes(spec.task, spec.algo, spec.request, policies, opts, streams))
    return rows_single, rows_batched, single, stacked


def _same_state(a, b) -> bool:
    """Weights, optimizer moments and random streams of two seats, bitwise."""
    for (sa, pa, oa), (sb, pb, ob) in zip(zip(*a), zip(*b)):
        weights = all(torch.equal(x, y) for x, y in zip(pa.state_dict().values(), pb.state_dict().values()))
        moments = all(torch.equal(x, y) for s, t in zip(oa.state.values(), ob.state.values())
                      for x, y in zip(s.values(), t.values()) if isinstance(x, torch.Tensor))
        rng = all(torch.equal(x, y) for x, y in zip(sa.state().values(), sb.state().values()))
        if not (weights and moments and rng):
            return False
    return True


TERMINAL = REPO / "reproduction" / "runs" / "terminal" / "reverse_h9"
IDENTITY = {"wall_s", "config_hash", "task.episodes", "experiment"}  # what a shorter rerun changes


@pytest.mark.slow  # a process, a few episodes at the paper's shape
@pytest.mark.skipif(not (runner.cpu_model() or "").startswith("AuthenticAMD") or
                    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                    reason="the runs were recorded with AVX2 kernels on an AMD CPU (docs/running.md)")
@pytest.mark.parametrize("algo, run, episodes", [("tpo", "c581346caf", 3),
                                                 ("grpo", "647037dba6", 4)])  # its 4th loss is 0.0
def test_a_single_run_reproduces_a_committed_runs_first_episodes(tmp_path, algo, run, episodes):
    """reproduction/runs/terminal/reverse_h9, seed 0 (one thread, AVX2 kernels): the first
    episodes, rerun under this code, every metric bit for bit (a zero's sign too)."""
    run_bench("task=reverse_h9", f"algo={algo}", "seed=0", f"task.episodes={episodes}", "threads=1",
              "log_every=0", f"output_root={tmp_path}", env={"ATEN_CPU_CAPABILITY": "avx2"})
    fresh = pd.read_parquet(next(tmp_path.rglob("metrics.parquet")))
    committed = pd.read_parquet(TERMINAL / algo / run / "seed=0" / "metrics.parquet").iloc[:len(fresh)]
    cols = [c for c in fresh.columns if c not in IDENTITY]
    assert len(fresh) == episodes and list(committed.columns) == list(fresh.columns)
    assert differences(fresh[cols], committed[cols]) == []  # float64 columns bit for bit


@pytest.mark.slow  # long in process
@pytest.mark.parametrize("algo", ALGOS)
def test_batched_seeds_equal_their_single_runs(algo):
    """Rows (every metric column), weights, optimizer state and streams, bit for bit, with
    the loss vmapped over the seed axis (not the per-seed fallback) and one optimizer
    update for all seeds."""
    spec = build(compose(*SMALL, f"algo={algo}"))
    engine.NOT_VMAPPABLE.discard(type(spec.algo))
    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(SEEDS), episodes=2)
    for e in range(2):
        for s in range(SEEDS):
            assert _same_row(rows_single[e][s], rows_batched[e][s]), (algo, e, s)
    assert _same_state(single, stacked)
    assert type(spec.algo) not in engine.NOT_VMAPPABLE
    # the seeds really differ from each other: a mix-up between them would show
    assert rows_single[-1][0]["loss"] != rows_single[-1][1]["loss"]


def test_a_seeds_noise_draws_what_multinomial_draws():
    """tasks.seq.exp_noise: argmax(p / noise(t)) is torch.multinomial(p, 1) from the same
    generator, step after step, and leaves the generator where H multinomial calls do
    (on the CPU the noise of H steps is one exponential_ call per seed)."""
    from tpo_bench.tasks.seq import exp_noise
    H, n, V = 4, 6, 5
    gens = [torch.Generator().manual_seed(s) for s in range(2)]
    own = [torch.Generator().manual_seed(s) for s in range(2)]
    probs = torch.softmax(torch.randn(H, 2, n, V, generator=torch.Generator().manual_seed(9)), -1)
    noise = exp_noise(gens, (n, V), H, probs)
    for t in range(H):
        drawn = (probs[t] / noise(t)).argmax(-1, keepdim=True)
        for s in range(2):
            assert torch.equal(drawn[s], torch.multinomial(probs[t, s], 1, generator=own[s]))
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(gens, own))


@pytest.mark.parametrize("reward", ["sequential", "terminal"])
def test_batched_seeds_equal_their_single_runs_under_each_reward(reward):
    """The other per-token rewards (the presets above run bag_of_tokens): a terminal
    reward is one value broadcast over the steps, whose means the stacked rollout takes
    over all seeds at once."""
    spec = build(compose(*SMALL, "algo=tpo", f"task.reward={reward}"))
    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(SEEDS), episodes=2)
    assert all(_same_row(a, b) for ea, eb in zip(rows_single, rows_batched) for a, b in zip(ea, eb))
    assert _same_state(single, stacked)


@pytest.mark.slow  # long in process
def test_batched_equals_single_at_the_paper_shape():
    """reverse_h10's B 100, K 8, H 10, V 2, one episode of TPO."""
    spec = build(compose("task=reverse_h10", "algo=tpo", "threads=1"))
    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(2), episodes=1)
    assert all(_same_row(a, b) for a, b in zip(rows_single[0], rows_batched[0]))
    assert _same_state(single, stacked)


@pytest.mark.slow  # long in process
@pytest.mark.parametrize("mutation", ["swap_streams", "skip_a_step", "share_state"])
def test_a_mixed_up_seed_is_caught(mutation):
    """The comparison above can fail: swap two seeds' action streams in the batch, let
    one seed's optimizer miss its step, or give seed 1's optimizer seed 0's state (after
    the first episode), and it does."""
    spec = build(compose(*SMALL, "algo=tpo"))

    class Skip:  # an optimizer that forgets to step
        def __init__(self, opt):
            self.opt = opt

        def zero_grad(self, set_to_none=True):
            self.opt.zero_grad(set_to_none=set_to_none)

        def step(self):
            pass

    def mutate(streams, policies, opts):
        if mutation == "swap_streams":
            a, b = streams[0], streams[1]
            streams = [Streams(a.init, a.data, b.action, seed=a.seed), Streams(b.init, b.data, a.action, seed=b.seed),
                       *streams[2:]]
        elif mutation == "skip_a_step":
            opts = [Skip(opts[0]), *opts[1:]]
        else:
            for p0, p1 in zip(policies[0].parameters(), policies[1].parameters()):
                if p0 in opts[0].state:
                    opts[1].state[p1] = opts[0].state[p0]
        return streams, policies, opts

    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(SEEDS), mutate=mutate)
    same = all(_same_row(a, b) for ea, eb in zip(rows_single, rows_batched) for a, b in zip(ea, eb))
    assert not (same and _same_state(single, stacked))


# ---------------------------------------------------------------- the bandits

@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory) -> str:
    """Real MNIST where TPO_BENCH_MNIST_DIR points at it, else test_data's 20 synthetic images."""
    real = os.environ.get("TPO_BENCH_MNIST_DIR", "")
    if real and os.path.isdir(real):
        return real
    folder = tmp_path_factory.mktemp("mnist")
    make_mnist(folder)
    return str(folder)


# Every optimizer these tasks use: adam (mnist's), muon_nadam, normalised_step (tabular's).
# MNIST at an even batch size (see test_mnist_at_an_odd_batch_size_...).
BANDITS = [
    ("mnist", ["algo=tpo", "task.batch_size=16"]),
    ("mnist", ["algo=tpo", "task.batch_size=16", "optim=muon_nadam"]),
    ("mnist_stale", ["algo=tpo", "task.batch_size=16", "task.delay=2"]),
    ("mnist", ["algo=grpo", "task.batch_size=16"]),
    ("mnist", ["algo=pg", "task.batch_size=16"]),
    ("mnist", ["algo=ce", "task.batch_size=16"]),
    ("tabular_single", ["algo=tpo"]),
    ("tabular_single", ["algo=grpo"]),
    ("tabular_single", ["algo=pg"]),
    ("tabular_multi", ["algo=tpo"]),
    ("tabular_multi", ["algo=grpo"]),
    ("tabular_multi", ["algo=ce"]),
]


def _bandit(task, args, mnist_dir):
    data = [f"task.data_dir={mnist_dir}"] if task.startswith("mnist") else []
    return build(compose(f"task={task}", *args, *data, "threads=1"))


@pytest.mark.parametrize("task, args", BANDITS, ids=[f"{t}-{'-'.join(a)}" for t, a in BANDITS])
def test_bandit_batched_seeds_equal_their_single_runs(task, args, mnist_dir):
    """MNIST (a stacked MLP) and tabular (stacked logit tables): each seed's rows, weights,
    optimizer state and streams equal its single run's, bit for bit."""
    spec = _bandit(task, args, mnist_dir)
    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(SEEDS))
    for e in range(EPISODES):
        for s in range(SEEDS):
            assert _same_row(rows_single[e][s], rows_batched[e][s]), (task, e, s)
    assert _same_state(single, stacked)
    assert type(spec.algo) not in engine.NOT_VMAPPABLE  # the loss was vmapped
    assert rows_single[-1][0] != rows_single[-1][1]  # the seeds differ: a mix-up would show


def test_mnist_batched_equals_single_at_the_paper_shape(mnist_dir):
    """B = 100 (science §MNIST bandit), TPO with Adam, one episode (real MNIST where it is available)."""
    spec = _bandit("mnist", ["algo=tpo"], mnist_dir)
    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(2), episodes=1)
    assert all(_same_row(a, b) for a, b in zip(rows_single[0], rows_batched[0]))
    assert _same_state(single, stacked)


def test_mnist_at_an_odd_batch_size_is_equal_up_to_rounding(mnist_dir):
    """At an odd B a seed's slice of a 50-wide activation starts 8 bytes off a 16-byte
    boundary, where MKL's sgemm rounds otherwise than on a single run's (aligned) tensor
    (tasks/mnist.py, forward_seeds): seed 0 (always aligned) stays bitwise, the others
    agree to float32 rounding (measured: 7e-7 relative at most over 5 episodes)."""
    spec = _bandit("mnist", ["algo=tpo", "task.batch_size=5"], mnist_dir)
    rows_single, rows_batched, single, stacked = _batched_vs_single(spec, range(SEEDS))
    assert all(_same_row(e[0], f[0]) for e, f in zip(rows_single, rows_batched))
    for e, f in zip(rows_single, rows_batched):
        for a, b in zip(e, f):
            assert a.keys() == b.keys()
            for k in a:
                assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7, nan_ok=True), k
    for (_, pa, _), (_, pb, _) in zip(zip(*single), zip(*stacked)):
        for x, y in zip(pa.state_dict().values(), pb.state_dict().values()):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("task, args", [("mnist", ["task.episodes=4", "task.eval_every=2", "task.batch_size=8"]),
                                        ("tabular_multi", ["task.episodes=4"])])
@pytest.mark.slow  # starts a process
def test_bandit_batched_job_writes_each_seed_as_its_single_run(tmp_path, task, args, mnist_dir):
    """The job's path (bench.runner.run_seeds), evaluation rows included: each seed's
    metrics.parquet equals the one its single run writes."""
    data = [f"task.data_dir={mnist_dir}"] if task == "mnist" else []
    cfg = compose(f"task={task}", "algo=tpo", *args, *data, "threads=1", "checkpoint_every=2")
    single = [build({**cfg, "seed": s, "output_root": str(tmp_path / "single")}) for s in range(SEEDS)]
    batch = [build({**cfg, "seed": s, "output_root": str(tmp_path / "batched")}) for s in range(SEEDS)]
    for spec in single:
        train_here(spec)
    assert [s["status"] for s in runner.run_seeds(batch)] == ["completed"] * SEEDS
    for a, b in zip(single, batch):
        pd.testing.assert_frame_equal(metrics(b.run_dir), metrics(a.run_dir), check_exact=True)


# ---------------------------------------------------------------- through the CLI

JOB = [*TINY, "task.episodes=6", "checkpoint_every=2", "seed=0", f"seeds_per_job={SEEDS}"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The job's seeds one after the other, unbatched: what every batched job must equal.
    Trained in process, each seed's run as `python -m bench` runs a job of single runs."""
    root = tmp_path_factory.mktemp("single")
    for spec in job_specs(compose(*JOB, f"output_root={root}"), explicit_keys(JOB)):
        assert train_here(spec)["status"] == "completed"
    return {d.name: metrics(d) for d in run_dirs(root)}


def _assert_equals_reference(root, reference):
    dirs = run_dirs(root)
    assert sorted(d.name for d in dirs) == sorted(reference)
    for d in dirs:
        assert summary(d)["status"] == "completed"
        pd.testing.assert_frame_equal(metrics(d), reference[d.name], check_exact=True)


@pytest.mark.slow
def test_batched_job_writes_each_seed_as_its_single_run(tmp_path, reference):
    run_bench(*JOB, "batch_seeds=true", f"output_root={tmp_path}")
    _assert_equals_reference(tmp_path, reference)
    assert [a["batch_seeds"] for d in run_dirs(tmp_path) for a in summary(d)["attempts_log"]] == [True] * SEEDS


@pytest.mark.slow
def test_batched_job_killed_mid_run_resumes_to_identical_metrics(tmp_path, reference):
    proc = subprocess.Popen([sys.executable, "-m", "bench", *JOB, "batch_seeds=true", "debug.sleep=0.3",
                             f"output_root={tmp_path}"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for(lambda: len(list(tmp_path.rglob("checkpoint.pt"))) == SEEDS)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps = {torch.load(p, weights_only=True)["next_step"] for p in tmp_path.rglob("checkpoint.pt")}
    again = run_bench(*JOB, "batch_seeds=true", f"output_root={tmp_path}")
    assert again.stdout.count("resumed from checkpoint at step") == SEEDS, (steps, again.stdout)
    _assert_equals_reference(tmp_path, reference)
    assert all(summary(d)["attempts"] == 2 for d in run_dirs(tmp_path))


@pytest.mark.slow
def test_batched_job_skips_a_completed_seed_and_joins_a_resumed_one(tmp_path, reference):
    """Seed 1 already completed (skipped, untouched); seed 2 killed at a checkpoint as a
    single run (it joins the batch at its step); seed 0 fresh."""
    seed1 = build(compose(*TINY, "task.episodes=6", "checkpoint_every=2", "seed=1",
                          f"output_root={tmp_path}"))
    assert train_here(seed1)["status"] == "completed"  # seed 1's single run, in process
    proc = subprocess.Popen([sys.executable, "-m", "bench", *TINY, "task.episodes=6", "checkpoint_every=2",
                             "seed=2", "debug.sleep=0.3", f"output_root={tmp_path}"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for(lambda: list(tmp_path.rglob("seed=2/checkpoint.pt")))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [done] = [d for d in run_dirs(tmp_path) if d.name == "seed=1"]
    before = (done / "summary.json").read_text()
    out = run_bench(*JOB, "batch_seeds=true", f"output_root={tmp_path}")
    assert "seed=1 already completed" in out.stdout
    assert out.stdout.count("resumed from checkpoint at step") == 1
    assert (done / "summary.json").read_text() == before
    _assert_equals_reference(tmp_path, reference)
    [joined] = [d for d in run_dirs(tmp_path) if d.name == "seed=2"]
    assert [a["batch_seeds"] for a in summary(joined)["attempts_log"]] == [False, True]  # single, then batched


@pytest.mark.parametrize("args, message", [
    pytest.param(["task=llm_chain_sum", "seeds_per_job=2", "batch_seeds=true"],
                 "it has no rollout_seeds/logprobs_seeds", marks=[
                     pytest.mark.slow,  # long in process: it imports the LLM stack
                     pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                                        reason="the llm extra")]),
    ([*TINY, "batch_seeds=sometimes"], "batch_seeds must be true or false"),
    ([*TINY, "compile=sometimes"], "compile must be true or false"),
])
def test_batch_seeds_refused_where_it_cannot_run(args, message):
    """Each refusal where `python -m bench` meets it, in its order: the command line's
    values (config.check_overrides), then the job's specs (jobs.job_specs)."""
    assert message in refuse_here(*args)


@pytest.mark.slow
def test_a_batch_seeds_refusal_exits_2_before_any_run_dir(tmp_path):
    proc = run_bench(*TINY, "batch_seeds=sometimes", f"output_root={tmp_path}", check=False)
    assert proc.returncode == 2 and "batch_seeds must be true or false" in proc.stderr, proc.stderr
    assert not run_dirs(tmp_path)


@pytest.mark.slow
def test_a_diverging_seed_fails_alone(tmp_path, reference):
    """Seed 1's loss reads NaN at step 2 (debug.nan_at, given to that seed only): it is
    recorded `diverged` with its rows so far; seeds 0 and 2 complete as their single runs."""
    cfg = compose(*JOB, f"output_root={tmp_path}")
    specs = [build({**cfg, "seed": s, "debug": {**cfg["debug"], "nan_at": 2 if s == 1 else -1}})
             for s in range(SEEDS)]
    summaries = runner.run_seeds(specs)
    assert [s["status"] for s in summaries] == ["completed", "failed", "completed"]
    assert summaries[1]["error_kind"] == "diverged" and summaries[1]["rows"] == 2
    dirs = {d.name: d for d in run_dirs(tmp_path)}
    for name in ("seed=0", "seed=2"):
        pd.testing.assert_frame_equal(metrics(dirs[name]), reference[name], check_exact=True)


# ---------------------------------------------------------------- a batch's faults, in process

STOPPABLE = [*TINY, "task.episodes=6", "checkpoint_every=100"]  # no checkpoint but a signal's


def _specs(tmp_path, *args, nan_at: dict[int, int] | None = None):
    """The job's specs, seed s's loss NaN at step nan_at[s] (debug.nan_at, that seed only)."""
    cfg = compose(*STOPPABLE, *args, f"output_root={tmp_path}")
    return [build({**cfg, "seed": s, "debug": {**cfg["debug"], "nan_at": (nan_at or {}).get(s, -1)}})
            for s in range(SEEDS)]


def _when(monkeypatch, seed: int, step: int, act) -> None:
    """`act()` just before seed `seed` records step `step` (after the seeds before it have)."""
    record = runner.record_step

    def recording(seat, at, row, asked, why):
        if seat.spec.run.seed == seed and at == step:
            act()
        return record(seat, at, row, asked, why)

    monkeypatch.setattr(runner, "record_step", recording)


def _kill_self(signum):
    return lambda: os.kill(os.getpid(), signum)


@pytest.mark.slow  # starts a process
def test_a_stop_mid_step_checkpoints_every_seed_or_none(tmp_path, monkeypatch):
    """SIGTERM while seed 1 records step 1 (seed 0 has recorded it already): the batch read
    the request once for that step, so no seed checkpoints at step 1 and every seed does
    at the next boundary; each is resumable from the same step."""
    specs = _specs(tmp_path)
    _when(monkeypatch, 1, 1, _kill_self(signal.SIGTERM))
    with pytest.raises(interrupts.Interrupted):
        runner.run_seeds(specs)
    steps = [torch.load(s.run_dir / "checkpoint.pt", weights_only=True)["next_step"]
             if (s.run_dir / "checkpoint.pt").exists() else None for s in specs]
    assert steps == [3] * SEEDS
    assert [summary(s.run_dir)["status"] for s in specs] == ["interrupted"] * SEEDS


@pytest.mark.slow  # starts a process
def test_an_interrupted_batch_reports_each_seed_as_it_recorded_itself(tmp_path, monkeypatch):
    """Seed 1 diverges at step 1, then SIGTERM at step 2: the sweep is told seed 1 failed
    (diverged) and seeds 0 and 2 were interrupted, as their summary.json files say."""
    specs = _specs(tmp_path, nan_at={1: 1})
    _when(monkeypatch, 0, 2, _kill_self(signal.SIGTERM))
    with pytest.raises(interrupts.Interrupted) as stopped:
        runner.run_seeds(specs)
    answers = stopped.value.answers
    assert [a["status"] for a in answers] == ["interrupted", "failed", "interrupted"]
    assert answers[1]["error_kind"] == "diverged"
    assert [a["status"] for a in answers] == [summary(s.run_dir)["status"] for s in specs]


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("fault", ["requeue_handler", "batched_episode"])
def test_an_error_outside_one_seeds_steps_fails_every_seed(tmp_path, monkeypatch, fault):
    """An error no one seed's step raised fails each seed with it (not `interrupted`, which
    would make the sweep stop): the handler SIGUSR2 hands over to after the checkpoint
    (submitit's requeue) raising, or the batched episode itself raising."""
    specs = _specs(tmp_path)

    def boom(*args):
        raise RuntimeError("boom")

    previous = signal.signal(signal.SIGUSR2, boom)
    try:
        if fault == "requeue_handler":
            _when(monkeypatch, 0, 1, _kill_self(signal.SIGUSR2))
        else:
            episodes = runner.train_episodes
            calls = []
            monkeypatch.setattr(runner, "train_episodes",
                                lambda *a: boom() if len(calls) == 2 else calls.append(1) or episodes(*a))
        summaries = runner.run_seeds(specs)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert [(s["status"], s["error_kind"], s["reason"]) for s in summaries] == \
        [("failed", "error", "RuntimeError: boom")] * SEEDS


# ---------------------------------------------------------------- seats and their records

def _lock_is_free(run_dir) -> bool:
    """Whether another process could take the run's lock now (a POSIX lock is per process:
    this one would always get it)."""
    probe = "import fcntl, os, sys; fcntl.lockf(os.open(sys.argv[1], os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)"
    return subprocess.run([sys.executable, "-c", probe, str(run_dir / ".lock")],
                          capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_failed_seed_is_recorded_and_released_while_the_others_train(tmp_path, monkeypatch):
    """Seed 1 diverges at step 1: by step 3 its summary says `failed` and its lock is free
    (another process may take it up), while seed 0 is still held and running."""
    specs = _specs(tmp_path, nan_at={1: 1})
    seen = {}

    def at_step_3():
        seen.update(failed=summary(specs[1].run_dir)["status"], free=_lock_is_free(specs[1].run_dir),
                    other=summary(specs[0].run_dir)["status"], other_free=_lock_is_free(specs[0].run_dir))

    _when(monkeypatch, 0, 3, at_step_3)
    assert [s["status"] for s in runner.run_seeds(specs)] == ["completed", "failed", "completed"]
    assert seen == {"failed": "failed", "free": True, "other": "running", "other_free": False}


@pytest.mark.slow  # starts a process
def test_a_seed_waiting_to_join_keeps_its_heartbeat(tmp_path, monkeypatch):
    """Seed 2 resumes at step 4 (its single run diverged there, after a checkpoint), seeds 0
    and 1 start at 0: while it waits to join, its summary.json heartbeat goes on (at
    every due time, as a single run's does; here due at every step), so that it does not
    read as a killed run."""
    specs = _specs(tmp_path, "checkpoint_every=2")
    train_here(build({**compose(*STOPPABLE, "checkpoint_every=2", f"output_root={tmp_path}"),
                      "seed": 2, "debug": {"nan_at": 4}}))
    assert torch.load(specs[2].run_dir / "checkpoint.pt", weights_only=True)["next_step"] == 4
    monkeypatch.setattr(rundir, "HEARTBEAT_S", 0.0)
    episodes, started, joined = runner.train_episodes, [], []

    def watched(task, algo, request, policies, *rest):
        started.append(time.time())
        if len(policies) == SEEDS and not joined:  # seed 2's first episode
            joined.append(summary(specs[2].run_dir))
        return episodes(task, algo, request, policies, *rest)

    monkeypatch.setattr(runner, "train_episodes", watched)
    assert [s["status"] for s in runner.run_seeds(specs)] == ["completed"] * SEEDS
    assert len(started) == 6 and joined[0]["status"] == "running"
    assert joined[0]["heartbeat"] > started[2]  # beaten after the others trained step 2


# ---------------------------------------------------------------- the captured epoch (compile=true)

def test_compile_is_not_part_of_a_runs_identity():
    """compile=true lands in (and is skipped by) the run directory of compile=false."""
    a, b = build(compose(*SMALL, "algo=tpo")), build(compose(*SMALL, "algo=tpo", "compile=true"))
    assert a.config_hash == b.config_hash and a.run_dir == b.run_dir


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["tpo", "grpo"])
def test_the_captured_epoch_has_no_graph_break(algo):
    """torch._dynamo.explain over what `captured` compiles (the stacked log-prob forward
    and the vmapped loss): one graph, no break."""
    spec = build(compose(*SMALL, f"algo={algo}"))
    streams, policies, _ = _seats(spec, range(2))
    batches = [ro.batch for ro in spec.task.rollout_seeds(policies, spec.request, streams)]
    explained = torch._dynamo.explain(
        lambda b: engine.seed_losses(spec.algo, b, spec.task.logprobs_seeds(policies, b)))(batches)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


@pytest.mark.slow
def test_a_captured_epoch_equals_the_eager_one(monkeypatch):
    """compile=true through dynamo and AOTAutograd (backend aot_eager: the capture without
    code generation) gives the eager rows and weights bit for bit (measured: 0 difference
    over 2 episodes of GRPO); inductor's generated kernels are not checked here."""
    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")
    spec = build(compose(*SMALL, "algo=grpo"))
    eager, comp = _seats(spec, range(2)), _seats(spec, range(2))
    for _ in range(2):
        rows_e = engine.train_episodes(spec.task, spec.algo, spec.request, eager[1], eager[2], eager[0])
        rows_c = engine.train_episodes(spec.task, spec.algo, spec.request, comp[1], comp[2], comp[0],
                                        compile=True)
        assert all(_same_row(a, b) for a, b in zip(rows_e, rows_c))
    assert _same_state(eager, comp)
    assert engine.CAPTURED  # the captured path ran


def _with_reference(spec, kl_ref: float):
    """spec's sequence task with a KL penalty of kl_ref to a reference whose log-probs are
    the rollout's shifted by 0.1 (as the LLM task's frozen reference would give them)."""
    import dataclasses

    base = type(spec.task)

    class WithReference(base):
        def rollout_seeds(self, policies, request, streams):
            return [dataclasses.replace(ro, batch=dataclasses.replace(ro.batch, logp_ref=ro.batch.logp_old - 0.1))
                    for ro in base.rollout_seeds(self, policies, request, streams)]
    WithReference.kl_ref = kl_ref
    return WithReference(**{f.name: getattr(spec.task, f.name) for f in dataclasses.fields(spec.task)})


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 2])
def test_a_captured_epoch_with_the_kl_penalty_equals_the_eager_one(monkeypatch, seeds):
    """compile=true with the task's KL penalty to a reference (the LLM family's kl_ref) in
    the captured function, for a single run and a batch: the eager rows and weights bit
    for bit (aot_eager), and the penalty is in the loss (it moves it)."""
    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")
    spec = build(compose(*SMALL, "algo=grpo"))
    task, plain = _with_reference(spec, 0.5), _with_reference(spec, 0.0)
    eager, comp, none = _seats(spec, range(seeds)), _seats(spec, range(seeds)), _seats(spec, range(seeds))
    for _ in range(2):
        rows_e = engine.train_episodes(task, spec.algo, spec.request, eager[1], eager[2], eager[0])
        rows_c = engine.train_episodes(task, spec.algo, spec.request, comp[1], comp[2], comp[0], compile=True)
        rows_0 = engine.train_episodes(plain, spec.algo, spec.request, none[1], none[2], none[0])
        assert all(_same_row(a, b) for a, b in zip(rows_e, rows_c))
        assert all(a["loss"] != b["loss"] for a, b in zip(rows_e, rows_0))
    assert _same_state(eager, comp) and engine.CAPTURED


# ---------------------------------------------------------------- one loop

@pytest.mark.slow  # starts a process
def test_a_single_run_is_the_job_loop_at_one_seed(tmp_path, monkeypatch):
    """A single run (runner.run) and a seed-batched job (runner.run_seeds) go through the
    same job loop and the same epoch loop (engine.train_episodes): one seed per call for
    the single run, all of them for the job; the single run's attempt is not recorded as
    batched."""
    calls = []
    episodes = runner.train_episodes

    def counted(task, algo, request, policies, *rest):
        calls.append(len(policies))
        return episodes(task, algo, request, policies, *rest)

    monkeypatch.setattr(runner, "train_episodes", counted)
    specs = _specs(tmp_path)
    assert train_here(specs[0])["status"] == "completed"
    assert calls == [1] * 6
    assert [a["batch_seeds"] for a in summary(specs[0].run_dir)["attempts_log"]] == [False]
    calls.clear()
    assert [s["status"] for s in runner.run_seeds(specs)] == ["completed"] * SEEDS
    assert calls == [SEEDS - 1] * 6  # seed 0, completed, is skipped
    assert [a["batch_seeds"] for a in summary(specs[1].run_dir)["attempts_log"]] == [True]


def test_bench_has_one_epoch_loop():
    """One loop over a batch's epochs in bench/ (engine.train_episodes): the single run and
    the seed batch share it."""
    import ast

    loops = [f"{p.name}:{node.lineno}" for p in sorted((REPO / "bench").glob("*.py"))
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.For) and "epochs" in ast.unparse(node.iter)]
    assert loops == [loops[0]] and loops[0].startswith("engine.py:"), loops


def test_a_subclass_overriding_rollout_or_logprobs_alone_is_run_through_its_override():
    """A seed-axis task's subclass that changes `rollout` or `logprobs` (not the seed
    methods) is run seed by seed through its override, never around it; batch_seeds, which
    would stack around it, is refused for it."""
    from tpo_bench.bench.build import check_batch_seeds
    from tpo_bench.bench.config import ConfigError
    from tpo_bench.contract.batch import by_seed_axis

    spec = build(compose(*TINY))
    calls = []

    class Halved(type(spec.task)):
        def rollout(self, policy, request, streams):
            calls.append("rollout")
            return super().rollout(policy, request, streams)

        def logprobs(self, policy, batch):
            calls.append("logprobs")
            return super().logprobs(policy, batch) * 0.5

    assert by_seed_axis(spec.task, "rollout", "rollout_seeds")
    task = Halved.__new__(Halved)
    task.__dict__.update(spec.task.__dict__)
    assert not by_seed_axis(task, "logprobs", "logprobs_seeds")
    rows = []
    for t in (spec.task, task):
        s = Streams.from_seed(spec.run.seed)
        policy = spec.task.make_policy(s.init)
        opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
        rows.append(train_episode(t, spec.algo, spec.request, policy, opt, s))
    assert {"rollout", "logprobs"} <= set(calls)
    assert rows[0]["loss"] != rows[1]["loss"]  # the halved log-probs reached the loss
    batched = dataclasses.replace(spec.run, batch_seeds=True, seeds_per_job=2)
    check_batch_seeds(batched, spec.task)
    with pytest.raises(ConfigError, match="overrides rollout or"):
        check_batch_seeds(batched, task)
