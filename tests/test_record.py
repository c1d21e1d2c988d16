"""The record says what ran: the group size each batch really had,
and the diagnostics of a multi-epoch update over its epochs, not only the first (where the
policy still is the actor, so a clipped fraction and a KL are 0 by construction)."""
import json
from dataclasses import dataclass
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from tpo_bench.bench.engine import train_episode
from tpo_bench.contract import schema
from tpo_bench.contract.batch import AlgorithmOptions, TaskOptions
from tpo_bench.contract.rng import Streams
from conftest import run_here


@dataclass
class CountingAlgo(AlgorithmOptions):
    """Its loss pulls one parameter; its diagnostics name the epoch they come from."""
    epochs: int = 4
    calls: int = 0

    def loss(self, batch, logp):
        self.calls += 1
        return SimpleNamespace(loss=logp.sum(), metrics={
            "clip_frac": float(self.calls), "kl": 10.0 * self.calls, "q_success": float(self.calls)})


class OneParam(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2, 3))


@dataclass
class StubTask(TaskOptions):
    def rollout(self, policy, req, streams):
        batch = SimpleNamespace(group_size=3, scores=torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]),
                                success=torch.tensor([[False, True, False], [True, True, True]]),
                                num_groups=2, logp_ref=None,
                                check_logp=lambda logp, source=None: None)
        return SimpleNamespace(batch=batch, error=0.5, reward_mean=0.5, rollouts=6, tokens=None,
                               metrics={})

    def logprobs(self, policy, batch):
        return policy.w


def test_clip_frac_and_kl_are_the_mean_over_epochs_the_rest_the_first():
    algo = CountingAlgo()
    policy = OneParam()
    row = train_episode(StubTask(), algo, None, policy, torch.optim.SGD(policy.parameters(), lr=0.1),
                        Streams.from_seed(0))
    assert algo.calls == 4
    assert row["clip_frac"] == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert row["kl"] == pytest.approx(10 * (1 + 2 + 3 + 4) / 4)
    assert row["q_success"] == 1.0  # the first epoch's, like the loss
    assert row["group_size"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("args,k", [
    (["task=demo", "algo=tpo", "algo.k=5", "task.batch_size=4", "task.sequence_length=3"], 5),
    (["task=demo", "algo=ppo", "task.batch_size=4", "task.sequence_length=3"], 1),
    (["task=tabular_single", "algo=grpo", "task.batch_size=50"], 50),  # the minibatch is the group
    (["task=tabular_multi", "algo=tpo"], None),  # the action set, whatever algo.k says
])
def test_the_effective_group_size_is_recorded(args, k, tmp_path):
    """Trained in this process, as `python -m bench ARGS` builds and runs it."""
    assert run_here(tmp_path, *args, "task.episodes=2", "threads=1")["status"] == "completed"
    (run,) = schema.run_dirs(tmp_path)
    df = pd.read_parquet(run / schema.METRICS)
    got = df["group_size_effective"].unique()
    assert len(got) == 1
    if k is None:  # the tabular action set: its size, not algo.k's 8
        assert got[0] == df["task.num_actions"].iloc[0] != df["algo.k"].iloc[0]
    else:
        assert got[0] == k
    assert json.loads((run / schema.SUMMARY).read_text())["group_size_effective"] == got[0]
