"""MNIST contextual bandit and tabular bandits (science §MNIST bandit, §Tabular bandits)."""
import json
import os

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from tpo_bench.algorithms import ALGORITHMS
from tpo_bench.algorithms._common import standardise
from tpo_bench.algorithms.pg import PG
from tpo_bench.contract.batch import Request
from tpo_bench.bench.optim import NormalisedStep
from tpo_bench.contract.rng import Streams
from tpo_bench.bench.build import build, needs
from tpo_bench.bench.engine import train_episode
from conftest import compose, refuse_here, run_bench, run_dirs
from tpo_bench.tasks.mnist import MnistTask
from tpo_bench.tasks.tabular import TabularMulti, TabularSingle, misalignment
from test_data import make_mnist

BANDIT_ALGOS = ("tpo", "grpo", "dg", "pg", "ce")


def request_for(name, **kw):
    algo = ALGORITHMS.get(name)(**kw)
    return algo, Request(name=name, k=algo.k, needs=needs(algo))


def direction(task, policy, name, **kw):
    """The method's ascent direction on the logits: minus the gradient of its loss."""
    algo, req = request_for(name, **kw)
    ro = task.rollout(policy, req, Streams.from_seed(0))
    policy.logits.grad = None
    algo.loss(ro.batch, task.logprobs(policy, ro.batch)).loss.backward()
    return -policy.logits.grad[0], ro


# ------------------------------------------------------------------ tabular multi

@pytest.mark.parametrize("name,weight", [
    ("tpo", 0.73), ("grpo", 1 / 3), ("dg", 0.1 / (1 + 0.1)), ("pg", 0.1), ("ce", 1.0)])
def test_per_context_weights_at_p_01(name, weight):
    """science §Tabular bandits: every exact direction is c (e_y - pi); at p = 0.1 (K = 10) c is
    TPO 0.73, GRPO 0.33, DG 0.09 (p sigmoid(-log p)), PG p, CE 1."""
    task = TabularMulti(num_contexts=1, num_actions=10)
    policy = task.make_policy(torch.Generator().manual_seed(0))
    with torch.no_grad():
        policy.logits.zero_()  # uniform: p = pi(correct) = 0.1
    g, _ = direction(task, policy, name)
    pi = torch.full((10,), 0.1)
    e_y = F.one_hot(torch.tensor(0), 10).float()
    c = (g @ (e_y - pi)) / ((e_y - pi) @ (e_y - pi))
    assert torch.allclose(g, c * (e_y - pi), atol=1e-6)  # parallel to e_y - pi
    assert c.item() == pytest.approx(weight, abs=0.005)
    if name == "tpo":
        assert c.item() == pytest.approx(0.73, abs=0.002)


def test_tabular_multi_directions_at_random_logits_match_spec():
    task = TabularMulti(num_contexts=5, num_actions=10)
    policy = task.make_policy(torch.Generator().manual_seed(3))
    pi = torch.softmax(policy.logits.detach(), -1)
    p = pi[:, :1]
    e_y = F.one_hot(torch.zeros(5, dtype=torch.long), 10).float()
    u = standardise(e_y)
    q = torch.softmax(torch.log(pi) + u, -1)
    expected = {
        "ce": e_y - pi, "pg": p * (e_y - pi), "dg": p * torch.sigmoid(-torch.log(p)) * (e_y - pi),
        "grpo": torch.sqrt(p / (1 - p)) * (e_y - pi), "tpo": q - pi,
    }
    for name, want in expected.items():
        algo, req = request_for(name)
        ro = task.rollout(policy, req, Streams.from_seed(0))
        policy.logits.grad = None
        algo.loss(ro.batch, task.logprobs(policy, ro.batch)).loss.backward()
        got = -policy.logits.grad * 5  # the loss averages over the 5 contexts
        assert torch.allclose(got, want, atol=1e-5), name


@pytest.mark.parametrize("task", [TabularSingle(), TabularMulti(num_contexts=4)], ids=lambda t: t.name)
@pytest.mark.parametrize("need", ["sample", "sample_group", "action_group", "label"])
def test_tabular_batches_per_need(task, need):
    """What each need gets: exact population probabilities only where tabular_multi
    stands in for sampling, the label only for CE, no sampled indicator (tabular_single's
    action-set scores are already the mean over its samples), and log-probs the task
    re-scores to the batch's own."""
    policy = task.make_policy(torch.Generator().manual_seed(0))
    with torch.no_grad():
        policy.logits.add_(torch.randn(policy.logits.shape, generator=torch.Generator().manual_seed(1)))
    b = task.rollout(policy, Request("x", 1, needs=need), Streams.from_seed(0)).batch
    pi = torch.softmax(policy.logits.detach(), -1)
    assert torch.equal(task.logprobs(policy, b), b.logp_old)
    assert b.sampled is None
    exact = isinstance(task, TabularMulti) and need in ("sample", "sample_group")
    assert (b.probs is not None) is exact
    if exact:
        assert torch.allclose(b.probs, pi, atol=1e-6)
    assert (b.label is not None) is (need == "label")
    if need == "label":
        assert b.label.tolist() == [0] * b.num_groups
        assert torch.equal(b.scores, F.one_hot(b.label, b.group_size).float())


def test_tabular_multi_error_after_step_and_misalignment():
    spec = build(compose("task=tabular_multi", "algo=ce", "task.episodes=3"))
    assert spec.algo.epochs == 1 and spec.optim_name == "normalised_step"
    task, algo, req = spec.task, spec.algo, spec.request
    streams = Streams.from_seed(0)
    policy = task.make_policy(streams.init)
    opt = NormalisedStep(policy.parameters(), alpha=0.1)
    before = policy.logits.detach().clone()
    row = train_episode(task, algo, req, policy, opt, streams)
    assert (policy.logits.detach() - before).norm().item() == pytest.approx(0.1, rel=1e-5)
    assert row["misalignment"] == pytest.approx(0.0, abs=1e-6)  # CE is the oracle
    after = task.evaluate(policy)["error"]
    assert after < row["error"]  # rollout error is before the step, evaluate after


# ------------------------------------------------------------------ tabular single

def test_tabular_single_directions_from_the_samples():
    task = TabularSingle()
    policy = task.make_policy(torch.Generator())
    with torch.no_grad():
        policy.logits[0, 0] = 2.0  # make the correct action common enough to be sampled
    pi = torch.softmax(policy.logits.detach()[0], -1)
    K = 100
    # PG: mean_b A_b (e_{a_b} - pi), A = r - 0.5
    g, ro = direction(task, policy, "pg")
    a = ro.batch.obs.action
    sampled = a.clone()  # every method's rollout draws these B actions (same stream, seed 0)
    r = (a == 0).float()
    E = F.one_hot(a, K).float()
    want = ((r - 0.5)[:, None] * (E - pi)).mean(0)
    assert torch.allclose(g, want, atol=1e-6)
    assert ro.error == pytest.approx(1 - pi[0].item())  # before the step
    # DG: gated with surprisal -log pi(a)
    g, ro = direction(task, policy, "dg")
    a = ro.batch.obs.action
    r = (a == 0).float()
    A = r - 0.5
    w = torch.sigmoid(A * -torch.log(pi[a]))
    assert torch.allclose(g, ((w * A)[:, None] * (F.one_hot(a, K).float() - pi)).mean(0), atol=1e-6)
    # GRPO: standardised rewards over the B samples
    g, ro = direction(task, policy, "grpo")
    a = ro.batch.obs.action
    r = (a == 0).float()
    A = (r - r.mean()) / (r.std(correction=0) + 1e-8)
    want = (A[:, None] * (F.one_hot(a, K).float() - pi)).sum(0)
    assert torch.allclose(g, want, atol=1e-5)
    # TPO: q - pi with u the standardised mean score vector
    g, ro = direction(task, policy, "tpo")
    s = ro.batch.scores[0]
    q = torch.softmax(torch.log(pi) + standardise(s), -1)
    assert torch.allclose(g, q - pi, atol=1e-6)
    # the score vector is the mean over the B samples of (r_b - 0.5) onehot(a_b): action k
    # scores (its sample count) * (+0.5 if correct else -0.5) / B, zero where never sampled
    counts = torch.bincount(sampled, minlength=K).double()
    sign = torch.full((K,), -0.5, dtype=torch.float64)
    sign[0] = 0.5
    assert torch.allclose(s.double(), counts * sign / sampled.numel(), atol=1e-7)
    assert torch.equal(s != 0, counts > 0) and 1 < int((counts > 0).sum()) < K


def test_tabular_single_misalignment_to_oracle():
    task = TabularSingle()
    policy = task.make_policy(torch.Generator())
    algo, req = request_for("ce")
    ro = task.rollout(policy, req, Streams.from_seed(0))
    algo.loss(ro.batch, task.logprobs(policy, ro.batch)).loss.backward()
    assert task.grad_metrics(policy)["misalignment"] == pytest.approx(0.0, abs=1e-6)
    assert misalignment(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])) == pytest.approx(1.0)
    assert misalignment(torch.tensor([1.0, 0.0]), torch.tensor([-2.0, 0.0])) == pytest.approx(2.0)


# ------------------------------------------------------------------ MNIST

@pytest.fixture
def mnist_dir(tmp_path):
    make_mnist(tmp_path / "mnist")
    return tmp_path / "mnist"


def test_mnist_scoring_per_need(mnist_dir):
    task = MnistTask(data_dir=str(mnist_dir), batch_size=16)
    streams = Streams.from_seed(0)
    policy = task.make_policy(streams.init)
    d = task.data()
    for need in ("sample", "sample_group", "action_group", "label"):
        s = Streams.from_seed(1)
        ro = task.rollout(policy, Request("x", 1, needs=need), s)
        b = ro.batch
        x = b.obs.images
        # the images are training images, drawn with the data stream
        idx = torch.randint(0, len(d.train_y), (16,), generator=Streams.from_seed(1).data)
        assert torch.equal(x, d.train_x[idx])
        y = d.train_y[idx]
        pi = torch.softmax(policy(x), -1).detach()
        assert torch.allclose(task.logprobs(policy, b), b.logp_old, atol=1e-6)
        assert b.probs is None and (b.sampled is not None) is (need == "action_group")
        assert (b.label is not None) is (need == "label")
        if need == "sample":
            a = b.obs.actions[:, 0]
            r = (a == y).float()
            assert torch.equal(b.scores[:, 0], r)
            # label-free baseline sum_a pi(a)^2 (science §MNIST bandit)
            assert torch.allclose(b.advantages[:, 0, 0], r - (pi ** 2).sum(-1), atol=1e-6)
            assert ro.error == pytest.approx(1 - r.mean().item())
        elif need == "sample_group":
            assert b.scores.shape == (1, 16) and b.num_groups == 1
        elif need == "action_group":
            assert b.scores.shape == (16, 10) and b.sampled.sum(-1).eq(1).all()
            a = b.sampled.float().argmax(-1)
            # the sampled action is the one the action stream drew (as in "sample")
            logp = torch.log_softmax(policy(x), -1).detach()
            assert torch.equal(a, torch.multinomial(logp.exp(), 1, generator=Streams.from_seed(1).action)[:, 0])
            r = (a == y).float()
            onehot = b.sampled.float()
            assert torch.allclose(b.scores, (r - (pi ** 2).sum(-1))[:, None] * onehot, atol=1e-6)
            assert torch.equal(b.token_rewards[..., 0], r[:, None] * onehot)  # only the sampled is seen
            assert torch.equal(b.success, (r[:, None] * onehot) > 0)
        else:
            assert torch.equal(b.label, y) and torch.equal(b.scores.argmax(-1), y)


def test_mnist_group_pg_weights_only_the_sampled_action(mnist_dir):
    """science §MNIST bandit: Group PG has TPO's s and u over the 10 classes but REINFORCEs only the
    sampled action, with weight u_a / eta; the other nine classes get no direct push."""
    task = MnistTask(data_dir=str(mnist_dir), batch_size=8)
    policy = task.make_policy(Streams.from_seed(0).init)
    b = task.rollout(policy, Request("x", 1, needs="action_group"), Streams.from_seed(2)).batch
    logp = b.logp_old.clone().requires_grad_(True)
    out = PG(k=10, advantage="group", eta=0.5).loss(b, logp)
    out.loss.backward()
    u = standardise(b.scores)
    a = b.sampled.float().argmax(-1)
    grad = logp.grad[..., 0]
    expect = torch.zeros_like(grad)
    expect[torch.arange(8), a] = -(u[torch.arange(8), a] / 0.5) / 8  # mean over 8 images
    assert torch.allclose(grad, expect, atol=1e-6)
    assert grad[~b.sampled].abs().max() == 0


def test_mnist_stale_actor_is_the_policy_of_d_updates_ago(mnist_dir):
    task = MnistTask(data_dir=str(mnist_dir), delay=3)
    policy = task.make_policy(torch.Generator().manual_seed(0))
    x = task.data().train_x[:5]
    history = []
    for step in range(7):
        history.append(policy(x).detach().clone())
        assert torch.allclose(policy.acting()(x), history[max(0, step - 3)], atol=1e-6)
        with torch.no_grad():
            for p in policy.mlp.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(step)))
    assert policy.ring.shape == (4, 42310)
    assert "ring" in policy.state_dict() and len(list(policy.parameters())) == 6


@pytest.mark.slow
def test_mnist_rows_per_evaluation(mnist_dir, tmp_path):
    run_bench("-m", "task=mnist", "algo=tpo,pg", "task.episodes=5", "task.eval_every=2",
              "task.batch_size=8", f"task.data_dir={mnist_dir}", f"output_root={tmp_path / 'o'}")
    for d in run_dirs(tmp_path / "o"):
        df = pd.read_parquet(d / "metrics.parquet")
        assert list(df["step"]) == [0, 2, 4, 5]  # before any update, every 2, the last
        assert df["error"].equals(df["test_error"]) and df["train_error"].iloc[1:].notna().all()
        assert (df["algo.epochs"] == 1).all()  # one Adam step per batch for every method
        assert "task.data_dir" not in df.columns  # a path, not part of the run's identity
        assert json.loads((d / "summary.json").read_text())["status"] == "completed"


def test_mnist_holdout_trains_without_and_scores_on_the_last_images(mnist_dir):
    """task.holdout=N: batches never draw the last N training images, `error` is measured
    on exactly those, `test_error` stays the test set's."""
    task = MnistTask(data_dir=str(mnist_dir), batch_size=64, holdout=6)
    policy = task.make_policy(torch.Generator().manual_seed(0))
    d = task.data()
    n = len(d.train_y)
    streams = Streams.from_seed(3)
    for _ in range(20):
        x = task.rollout(policy, Request("x", 1, needs="sample"), streams).batch.obs.images
        drawn = [int(torch.nonzero((d.train_x == row).all(-1))[0]) for row in x]
        assert max(drawn) < n - 6
    with torch.no_grad():
        held = (policy(d.train_x[-6:]).argmax(-1) != d.train_y[-6:]).float().mean().item()
        test = (policy(d.test_x).argmax(-1) != d.test_y).float().mean().item()
    assert task.evaluate(policy) == {"error": pytest.approx(held), "test_error": pytest.approx(test)}


def test_mnist_holdout_hashes_only_when_set(mnist_dir):
    """A knob hashed only when set leaves the hashes of runs that do not use it."""
    plain = build(compose("task=mnist", "algo=tpo"))
    zero = build(compose("task=mnist", "algo=tpo", "task.holdout=0"))
    held = build(compose("task=mnist", "algo=tpo", "task.holdout=10000"))
    assert "holdout" not in plain.config["task"] and zero.config_hash == plain.config_hash
    assert held.config["task"]["holdout"] == 10000 and held.config_hash != plain.config_hash
    with pytest.raises(ValueError, match="task.holdout=20 leaves no training images"):
        MnistTask(data_dir=str(mnist_dir), holdout=20).data()


BANDIT_REFUSALS = [
    (["task=mnist", "algo=tpo", "algo.k=4"], "algo.k: on task 'mnist' the group of tpo is fixed"),
    (["task=mnist", "algo=tpo_token"], "tpo_token (algo.level=token) has no meaning on task 'mnist'"),
    (["task=tabular_single", "algo=grpo", "algo.k=4"], "algo.k: on task 'tabular_single'"),
    (["task=mnist", "algo=pg", "algo.epochs=4"], "algo.epochs=4: task 'mnist' takes 1"),
    (["task=seq", "algo=ce"], "ce is a supervised oracle"),
]


@pytest.mark.parametrize("args,message", BANDIT_REFUSALS)
def test_bandit_refusals(args, message):
    """Each is a ConfigError of the job's specs, as `python -m bench` builds them."""
    assert message in refuse_here(*args)


@pytest.mark.slow
def test_a_bandit_refusal_exits_2_before_any_run_dir(tmp_path):
    """The CLI's path for these refusals: exit 2, the message on stderr, nothing created."""
    args, message = BANDIT_REFUSALS[0]
    proc = run_bench(*args, f"output_root={tmp_path}", check=False)
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr
    assert run_dirs(tmp_path) == []


@pytest.mark.slow
def test_missing_mnist_names_data_dir(tmp_path):
    proc = run_bench("task=mnist", f"task.data_dir={tmp_path / 'none'}", "task.download=false",
                     f"output_root={tmp_path / 'o'}", check=False)
    assert proc.returncode != 0 and "task.data_dir" in proc.stderr


@pytest.fixture(scope="module")
def tabular_runs(tmp_path_factory):
    """Every tabular method on both tabular tasks, one multirun."""
    root = tmp_path_factory.mktemp("tabular")
    run_bench("-m", "task=tabular_single,tabular_multi", "algo=tpo,dg,grpo,pg,ce", "seed=0",
              "task.episodes=4", f"output_root={root}")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("task", ["tabular_single", "tabular_multi"])
def test_tabular_multirun_end_to_end(task, tabular_runs):
    dirs = [d for d in run_dirs(tabular_runs) if d.relative_to(tabular_runs).parts[0] == task]
    assert sorted(d.parts[-3] for d in dirs) == sorted(("tpo", "dg", "grpo", "pg", "ce"))
    for d in dirs:
        df = pd.read_parquet(d / "metrics.parquet")
        assert df["misalignment"].dropna().between(-1e-5, 2 + 1e-5).all() and df["misalignment"].notna().any()
        assert (df["optim.name"] == "normalised_step").all()
        steps = [0, 1, 2, 3, 4] if task == "tabular_multi" else [0, 1, 2, 3]
        assert list(df["step"]) == steps


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TPO_BENCH_MNIST_DIR"),
                    reason="TPO_BENCH_MNIST_DIR not set (CI points it at its MNIST copy)")
def test_real_mnist_learns(tmp_path):
    run_bench("task=mnist", "algo=tpo", "task.episodes=100", "task.eval_every=100",
              f"output_root={tmp_path}")
    [d] = run_dirs(tmp_path)
    df = pd.read_parquet(d / "metrics.parquet")
    assert df["error"].iloc[0] > 0.8 and df["error"].iloc[-1] < 0.5
