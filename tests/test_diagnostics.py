"""science §Measurement diagnostics as the runner records them, each against a value computed here by
hand (plain Python on a tiny hand-built batch, or the policy's own parameters and
gradients on a real tiny episode), so that a diagnostic that is inverted, pinned,
mis-normalised or swapped turns a test red.
"""
import copy
import math
import statistics
import warnings
from dataclasses import dataclass

import pytest
import torch

from tpo_bench.algorithms.dg import DG
from tpo_bench.algorithms.grpo import GRPO
from tpo_bench.algorithms.pg import PG
from tpo_bench.algorithms.ppo import PPO
from tpo_bench.algorithms.tpo import TPO
from tpo_bench.contract.batch import Batch, Request, Rollout, TaskOptions
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.contract.rng import Streams
from tpo_bench.bench.build import build
from tpo_bench.bench.engine import train_episode
from conftest import TINY, compose

# ------------------------------------------------------------------ a hand-built episode

# Six groups of K = 3 one-step candidates, chosen so that the success-prompt, all-fail and
# zero-variance fractions all differ (2/6, 4/6, 3/6):
SCORES = [
    [0.0, 0.0, 0.0],         # all fail, zero variance
    [1.0, 0.0, 0.0],         # one success
    [1.0, 1.0, 1.0],         # all succeed, zero variance
    [0.5, 0.0, 0.5],         # partial credit, no success, variance
    [0.3, 0.3 + 1e-5, 0.3],  # no success, std 4.7e-6: above science §Measurement's 1e-6
    [0.3, 0.3 + 1e-8, 0.3],  # no success, std 4.7e-9: zero variance
]
SUCCESS = [[False] * 3, [True, False, False], [True] * 3, [False] * 3, [False] * 3, [False] * 3]
P_OLD = [[0.2, 0.3, 0.5], [0.03, 0.485, 0.485], [0.1, 0.6, 0.3],
         [1 / 3, 1 / 3, 1 / 3], [0.5, 0.25, 0.25], [0.6, 0.2, 0.2]]
N, K = len(SCORES), 3


class Table(torch.nn.Module):
    """The policy: one free log-prob per candidate."""

    def __init__(self, z0):
        super().__init__()
        self.z = torch.nn.Parameter(torch.tensor(z0, dtype=torch.float64))


@dataclass(frozen=True)
class FixedTask(TaskOptions):
    """A task whose every rollout is `batch`; the current policy's log-probs are the
    table's entries, so logp_old and the policy can differ (as with a stale actor)."""
    batch: Batch
    episodes: int = 1
    name: str = "fixed"

    def rollout(self, policy, req, streams):
        return Rollout(self.batch, error=0.5, reward_mean=0.5, rollouts=self.batch.num_groups)

    def logprobs(self, policy, batch):
        return policy.z.view_as(batch.logp_old)


def hand_batch():
    return Batch.sampled_group(torch.tensor(P_OLD, dtype=torch.float64).log(),
                               torch.tensor(SCORES, dtype=torch.float64), torch.tensor(SUCCESS))


def fixed_episode(batch, algo, z0, lr=0.5, k=K):
    policy = Table(z0)
    opt = torch.optim.SGD(policy.parameters(), lr=lr)
    req = Request(name="fixed", k=k, needs="action_group" if k > 1 else "sample")
    return train_episode(FixedTask(batch), algo, req, policy, opt, Streams.from_seed(0))


def hand_episode(algo, z0, lr=0.5):
    return fixed_episode(hand_batch(), algo, z0, lr)


def softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def mean(xs):
    return sum(xs) / len(xs)


def split_by_success(values):
    """(mean over successful candidates, mean over failed ones) of a per-candidate table."""
    succ = [v for row, srow in zip(values, SUCCESS) for v, s in zip(row, srow) if s]
    fail = [v for row, srow in zip(values, SUCCESS) for v, s in zip(row, srow) if not s]
    return mean(succ), mean(fail)


def tpo_q_by_hand():
    """science §Update rules target with eta = 1: q = softmax(log p_old + u), u standardised with the
    population std (centred, unscaled below 1e-6)."""
    out = []
    for s, p in zip(SCORES, P_OLD):
        m, sd = mean(s), statistics.pstdev(s)
        u = [(x - m) / sd if sd > 1e-6 else x - m for x in s]
        out.append(softmax([math.log(pi) + ui for pi, ui in zip(p, u)]))
    return out


def test_group_fractions_on_hand_batch():
    row = hand_episode(TPO(k=K), [[math.log(p) for p in r] for r in P_OLD])
    assert row["success_prompt_frac"] == pytest.approx(2 / 6)  # groups 1 and 2
    assert row["all_fail_frac"] == pytest.approx(4 / 6)        # groups 0, 3, 4, 5
    assert row["zero_var_frac"] == pytest.approx(3 / 6)        # groups 0, 2, 5


def test_group_fractions_undefined_for_single_samples():
    """science §Measurement: NaN for single-sample methods; the success fraction is still defined."""
    spec = build(compose(*TINY, "algo=pg"))
    task = Recording(spec.task)
    streams = Streams.from_seed(0)
    policy = spec.task.make_policy(streams.init)
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    row = train_episode(task, PG(), spec.request, policy, opt, streams)
    assert math.isnan(row["all_fail_frac"]) and math.isnan(row["zero_var_frac"])
    success = task.batches[0].success.tolist()
    assert row["success_prompt_frac"] == pytest.approx(mean([any(r) for r in success]))


def test_tpo_target_mass_by_success():
    q = tpo_q_by_hand()
    q_success, q_fail = split_by_success(q)
    row = hand_episode(TPO(k=K), [[math.log(p) for p in r] for r in P_OLD])
    assert row["q_success"] == pytest.approx(q_success, rel=1e-9)
    assert row["q_fail"] == pytest.approx(q_fail, rel=1e-9)
    assert q_success != pytest.approx(q_fail, rel=0.05)  # a swap would show


def test_first_epoch_grad_norm_and_whole_episode_param_change():
    """TPO's gradient wrt the group logits is (softmax(z) - q) / N: the first epoch's
    global L2 norm, and the total move of SGD over all four epochs, by hand."""
    q = tpo_q_by_hand()
    z0 = [[math.log(p) for p in r] for r in P_OLD]
    z0[3] = [0.4, -0.2, 0.1]  # not at p_old: the first-epoch gradient of group 3 is large
    lr = 0.5
    z, norms = copy.deepcopy(z0), []
    for _ in range(4):
        grad = [[(pi - qi) / N for pi, qi in zip(softmax(zr), qr)] for zr, qr in zip(z, q)]
        norms.append(math.sqrt(sum(g * g for gr in grad for g in gr)))
        z = [[zi - lr * gi for zi, gi in zip(zr, gr)] for zr, gr in zip(z, grad)]
    change = math.sqrt(sum((a - b) ** 2 for ra, rb in zip(z, z0) for a, b in zip(ra, rb)))
    row = hand_episode(TPO(k=K, epochs=4), z0, lr=lr)
    assert row["grad_norm"] == pytest.approx(norms[0], rel=1e-9)
    assert norms[0] != pytest.approx(norms[-1], rel=0.01)  # the first epoch, not the last
    assert row["param_change"] == pytest.approx(change, rel=1e-9)
    first_step = lr * norms[0]
    assert change != pytest.approx(first_step, rel=0.01)  # the whole episode, not one step


# Log-ratios of the current policy to the behaviour one, per candidate. |r - 1| > 0.2 for
# d = 0.19 (r = 1.209) but not for d = -0.21 (r = 0.811): the band is on the ratio, not on
# |d| (which would count 6, not 7, of these).
D = [[0.3, -0.1, 0.0], [0.0, 0.25, -0.3], [0.19, -0.21, 0.05],
     [-0.5, 0.1, 0.0], [0.0, 0.19, 0.4], [-0.05, 0.0, 0.0]]


def test_grpo_clip_kl_and_advantage_magnitudes():
    """GRPO diagnostics with logp_old != the current policy's log-probs, on one epoch (the
    row's clip_frac and kl are the mean over epochs: test_record.py)."""
    z0 = [[math.log(p) + d for p, d in zip(pr, dr)] for pr, dr in zip(P_OLD, D)]
    row = hand_episode(GRPO(k=K, epochs=1), z0)
    ds = [d for dr in D for d in dr]
    assert row["clip_frac"] == pytest.approx(mean([abs(math.exp(d) - 1) > 0.2 for d in ds]))
    assert row["clip_frac"] == pytest.approx(7 / 18)
    # reverse KL to the rollout policy, k3 estimator: exp(-d) + d - 1, mean over candidates
    assert row["kl"] == pytest.approx(mean([math.exp(-d) + d - 1 for d in ds]), rel=1e-9)
    absA = []
    for s in SCORES:
        m, sd = mean(s), statistics.pstdev(s)
        absA.append([abs(x - m) / (sd + 1e-8) for x in s])
    absA_success, absA_fail = split_by_success(absA)
    assert row["absA_success"] == pytest.approx(absA_success, rel=1e-6)
    assert row["absA_fail"] == pytest.approx(absA_fail, rel=1e-6)
    assert absA_success != pytest.approx(absA_fail, rel=0.05)


def test_ppo_clip_fraction_is_over_tokens_and_on_the_ratio():
    """PPO's per-token ratio r_t = exp(logp_t - logp_old_t); the fraction of tokens with
    |r_t - 1| > 0.2 (3 samples x 3 tokens), on one epoch (the row's value is the mean over
    epochs: test_record.py)."""
    # clipped: 0.19 (twice), 0.3, -0.5, 0.25; not -0.21 (r = 0.811), though |d| > 0.2
    d = [[0.19, -0.21, 0.0], [0.3, 0.19, 0.0], [-0.5, 0.1, 0.25]]
    logp_old = torch.log(torch.tensor([[0.5, 0.4, 0.3], [0.2, 0.9, 0.6], [0.7, 0.1, 0.8]],
                                      dtype=torch.float64))
    adv = torch.tensor([[1.0, -1.0, 0.5], [-0.5, 2.0, 1.0], [1.0, 1.0, -1.0]], dtype=torch.float64)
    b = Batch.single_samples(logp_old, torch.zeros_like(logp_old), adv,
                             torch.zeros(3, dtype=torch.bool))
    z0 = (logp_old + torch.tensor(d, dtype=torch.float64)).tolist()
    row = fixed_episode(b, PPO(epochs=1), z0, k=1)
    assert row["clip_frac"] == pytest.approx(mean([abs(math.exp(x) - 1) > 0.2 for r in d for x in r]))
    assert row["clip_frac"] == pytest.approx(5 / 9)


# ------------------------------------------------------------------ DG's surprisal

def dg_batch():
    """Two single samples of two steps; the current policy moved away from logp_old."""
    logp_old = torch.tensor([[[math.log(0.9), math.log(0.1)]], [[math.log(0.5), math.log(0.3)]]],
                            dtype=torch.float64)
    adv = torch.tensor([[[0.5, -0.5]], [[1.0, 2.0]]], dtype=torch.float64)
    return Batch.single_samples(logp_old[:, 0], torch.zeros_like(logp_old[:, 0]), adv[:, 0],
                                torch.zeros(2, dtype=torch.bool))


CURRENT = [[[math.log(0.2), math.log(0.7)]], [[math.log(0.05), math.log(0.9)]]]


@pytest.mark.parametrize("surprisal", ["behaviour", "current"])
def test_dg_gate_uses_the_chosen_surprisal(surprisal):
    b = dg_batch()
    z = torch.tensor(CURRENT, dtype=torch.float64, requires_grad=True)
    out = DG(surprisal=surprisal).loss(b, z)
    out.loss.backward()
    gate_logp = b.logp_old if surprisal == "behaviour" else z.detach()
    w = torch.sigmoid(b.advantages * -gate_logp)
    assert torch.allclose(z.grad, -(w * b.advantages) / 2, rtol=1e-12)  # mean over 2 samples
    assert out.metrics["gate_mean"] == pytest.approx(w.mean().item())
    other = torch.sigmoid(b.advantages * -(z.detach() if surprisal == "behaviour" else b.logp_old))
    assert not torch.allclose(w, other, rtol=1e-3)  # the two choices are told apart here


def test_dg_current_surprisal_changes_a_two_epoch_episode():
    """In a second epoch on the same batch "current" recomputes -logp; "behaviour" keeps
    the rollout's. SGD on the sample log-probs, by hand: dz = lr * w * A / N."""
    b = dg_batch()
    A = b.advantages[:, 0].tolist()
    old = b.logp_old[:, 0].tolist()
    lr = 1.0

    def by_hand(surprisal):
        z = copy.deepcopy(old)
        for _ in range(2):
            gate = old if surprisal == "behaviour" else z
            z = [[zi + lr * (1 / (1 + math.exp(a * g))) * a / 2 for zi, a, g in zip(zr, ar, gr)]
                 for zr, ar, gr in zip(z, A, gate)]
        return math.sqrt(sum((x - y) ** 2 for xr, yr in zip(z, old) for x, y in zip(xr, yr)))

    changes = {}
    for surprisal in ("behaviour", "current"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DG warns about more than one epoch
            algo = DG(epochs=2, surprisal=surprisal)
        row = fixed_episode(b, algo, b.logp_old[:, 0].tolist(), lr=lr, k=1)
        changes[surprisal] = row["param_change"]
        assert row["param_change"] == pytest.approx(by_hand(surprisal), rel=1e-9), surprisal
    assert changes["current"] != pytest.approx(changes["behaviour"], rel=1e-3)


def test_dg_surprisal_reaches_the_algorithm_from_the_config():
    a = build(compose(*TINY, "algo=dg", "algo.surprisal=current"))
    b = build(compose(*TINY, "algo=dg"))
    assert a.algo.surprisal == "current" and b.algo.surprisal == "behaviour"
    assert a.config_hash != b.config_hash


# ------------------------------------------------------------------ a real tiny episode

class Recording:
    """A task that keeps the batches it hands out."""

    def __init__(self, task):
        self._task, self.batches = task, []

    def __getattr__(self, name):
        return getattr(self._task, name)

    def rollout(self, *args, **kwargs):
        ro = self._task.rollout(*args, **kwargs)
        self.batches.append(ro.batch)
        return ro


def test_recorded_diagnostics_on_a_tiny_tpo_run():
    """`python -m bench` TINY's TPO (Muon/NAdam, 4 epochs): every science §Measurement column recorded for
    two episodes against what the batch and the parameters say."""
    spec = build(compose(*TINY, "task.batch_size=6"))
    task = Recording(spec.task)
    streams = Streams.from_seed(spec.run.seed)
    policy = spec.task.make_policy(streams.init)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    for _ in range(2):
        start = copy.deepcopy(policy)
        for p in start.parameters():
            p.grad = None  # a deep copy carries the last episode's gradient
        row = train_episode(task, spec.algo, spec.request, policy, opt, streams)
        batch = task.batches[-1]
        groups = [(s, ok) for s, ok in zip(batch.scores.tolist(), batch.success.tolist())]
        assert row["success_prompt_frac"] == pytest.approx(mean([any(ok) for _, ok in groups]))
        assert row["all_fail_frac"] == pytest.approx(mean([not any(ok) for _, ok in groups]))
        assert row["zero_var_frac"] == pytest.approx(
            mean([statistics.pstdev(s) < 1e-6 for s, _ in groups]))
        # the first epoch's gradient: the episode's starting policy on the episode's batch
        spec.algo.loss(batch, spec.task.logprobs(start, batch)).loss.backward()
        norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in start.parameters()
                             if p.grad is not None))
        assert row["grad_norm"] == pytest.approx(norm, rel=1e-4)
        moved = math.sqrt(sum(float((a.detach() - b.detach()).pow(2).sum())
                              for a, b in zip(policy.parameters(), start.parameters())))
        assert moved > 0 and row["param_change"] == pytest.approx(moved, rel=1e-4)
    # not vacuous: the batches had groups of each kind between them
    fracs = [[any(ok) for ok in b.success.tolist()] for b in task.batches]
    assert any(any(f) for f in fracs) and any(not all(f) for f in fracs)
    assert any(mean(f) != 0.5 for f in fracs)  # where all-fail and its inverse differ
