"""DAPO's dynamic sampling: uninformative groups are replaced by groups of
fresh prompts, every drawn rollout is counted, and the batch's groups travel with their
obs (Batch.take / Batch.concat)."""
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from tpo_bench.bench import dynamic
from tpo_bench.bench.build import ConfigError, build
from tpo_bench.bench.engine import train_episode
from tpo_bench.contract.batch import AlgorithmOptions, Batch, Rollout, TaskOptions
from tpo_bench.contract.rng import Streams
from conftest import compose
from tpo_bench.tasks.seq import SeqObs


def group_batch(scores, tag):
    """N groups of K = 2 one-step candidates; obs records each group's tag."""
    s = torch.tensor(scores, dtype=torch.float64)
    n = len(scores)
    return Batch.sampled_group(torch.full_like(s, -0.7), s, s > 0.5,
                               obs=SeqObs(prompts=torch.full((n, 3), tag) + torch.arange(n)[:, None],
                                          answers=torch.zeros(n, 2, 3)))


def test_take_and_concat_keep_each_group_with_its_obs():
    a, b = group_batch([[0, 1], [1, 1], [0, 0]], 10), group_batch([[1, 0], [0, 0]], 20)
    joined = Batch.concat([a, b])
    assert joined.num_groups == 5 and joined.obs.prompts[:, 0].tolist() == [10, 11, 12, 20, 21]
    picked = joined.take(torch.tensor([3, 0]))
    assert picked.scores.tolist() == [[1, 0], [0, 1]]
    assert picked.obs.prompts[:, 0].tolist() == [20, 10]
    assert picked.success.tolist() == [[True, False], [False, True]]


def test_take_refuses_an_obs_that_is_not_by_group():
    bad = Batch.sampled_group(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.bool),
                              obs=SeqObs(prompts=torch.zeros(4, 3), answers=torch.zeros(2, 2, 3)))
    with pytest.raises(ValueError, match="obs.prompts.*cannot be split by group"):
        bad.take(torch.tensor([0]))


def test_top_up_fills_the_batch_with_informative_groups_and_counts_every_draw():
    first = Rollout(group_batch([[0, 0], [0, 1], [1, 1]], 0), error=0.5, reward_mean=0.5, rollouts=6)
    later = iter([Rollout(group_batch([[1, 1], [0, 0], [0, 0]], 100), 0.5, 0.5, 6),
                  Rollout(group_batch([[1, 0], [0, 1], [0, 1]], 200), 0.5, 0.5, 6)])
    ro, info = dynamic.top_up(first, lambda: next(later), max_batches=8)
    assert ro.batch.num_groups == 3  # B groups, no more
    assert ro.batch.obs.prompts[:, 0].tolist() == [1, 200, 201]  # in the order drawn
    assert bool(dynamic.informative(ro.batch).all())
    assert ro.rollouts == 18 and info == {"dyn_batches": 3.0, "dyn_groups": 3.0}
    assert ro.error == 0.5  # the episode's own batch's error


def test_top_up_stops_at_its_cap_and_never_trains_on_nothing():
    flat = Rollout(group_batch([[0, 0], [1, 1]], 0), error=1.0, reward_mean=0.0, rollouts=4)
    ro, info = dynamic.top_up(flat, lambda: flat, max_batches=3)
    assert ro.batch is flat.batch and ro.rollouts == 12
    assert info == {"dyn_batches": 3.0, "dyn_groups": 0.0}
    some = Rollout(group_batch([[0, 1], [1, 1]], 0), error=0.5, reward_mean=0.5, rollouts=4)
    ro, info = dynamic.top_up(some, lambda: flat, max_batches=2)
    assert ro.batch.num_groups == 1 and info["dyn_groups"] == 1.0  # fewer than B: what there is


@dataclass(frozen=True)
class Dapoish(AlgorithmOptions):
    k: int = 2
    epochs: int = 1
    dynamic_sampling: int = 4

    def loss(self, batch, logp):
        self.seen.append(batch.num_groups)
        return SimpleNamespace(loss=logp.sum() * 0 + logp.mean(), metrics={})


def test_the_episode_reports_the_first_batch_and_counts_the_top_up(monkeypatch):
    batches = iter([Rollout(group_batch([[0, 0], [0, 1]], 0), 0.75, 0.25, 4),
                    Rollout(group_batch([[1, 0], [1, 1]], 50), 0.25, 0.75, 4)])

    class Task(TaskOptions):
        def rollout(self, policy, req, streams):
            return next(batches)

        def logprobs(self, policy, batch):
            return policy.w.expand_as(batch.logp_old)

    policy = torch.nn.Module()
    policy.w = torch.nn.Parameter(torch.zeros(1, 1, 1, dtype=torch.float64))
    algo = Dapoish()
    object.__setattr__(algo, "seen", [])
    row = train_episode(Task(), algo, None, policy, torch.optim.SGD(policy.parameters(), lr=0.1),
                        Streams.from_seed(0))
    assert algo.seen == [2]  # trained on a full batch of informative groups
    assert row["rollouts"] == 8 and row["dyn_batches"] == 2.0
    assert row["error"] == 0.75 and row["zero_var_frac"] == 0.5  # the episode's own batch


def test_dynamic_sampling_is_dropped_or_refused_where_groups_cannot_be_replaced(tmp_path, monkeypatch):
    from tpo_bench.algorithms import ALGORITHMS

    @dataclass(frozen=True)
    class WithDynamic(AlgorithmOptions):
        k: int = 8
        epochs: int = 1
        dynamic_sampling: int = 4
        needs = "sample_group"

        def loss(self, batch, logp):
            raise AssertionError

    monkeypatch.setitem(ALGORITHMS._table, "withdyn", WithDynamic)
    cfg = compose("task=tabular_single", f"output_root={tmp_path}")
    cfg["algo"] = {"name": "withdyn"}
    with pytest.raises(ConfigError, match="algo.dynamic_sampling=4.*tabular_single"):
        build(cfg, explicit=frozenset({"algo.dynamic_sampling"}))
    # a preset's dynamic sampling is dropped there, and the record says 0
    spec = build(cfg)
    assert spec.algo.dynamic_sampling == 0 and spec.config["algo"]["dynamic_sampling"] == 0
    cfg = compose("task=demo", f"output_root={tmp_path}")
    cfg["algo"] = {"name": "withdyn"}
    assert build(cfg).algo.dynamic_sampling == 4


def test_top_up_draws_from_streams_of_its_own_so_the_episode_prompts_stay_paired():
    """The prompts of episode t are the same for every method of a seed: top-up rollouts
    must not consume the data stream the next episode's prompts come from."""
    seen = []

    class Task(TaskOptions):
        def rollout(self, policy, req, streams):
            seen.append(streams)
            torch.rand(3, generator=streams.data)  # what drawing prompts does
            flat = len(seen) < 3
            return Rollout(group_batch([[0, 0], [1, 1]] if flat else [[0, 1], [1, 0]], len(seen)),
                           0.5, 0.5, 4)

        def logprobs(self, policy, batch):
            return policy.w.expand_as(batch.logp_old)

    policy = torch.nn.Module()
    policy.w = torch.nn.Parameter(torch.zeros(1, 1, 1, dtype=torch.float64))
    streams, plain = Streams.from_seed(3), Streams.from_seed(3)
    algo = Dapoish()
    object.__setattr__(algo, "seen", [])
    train_episode(Task(), algo, None, policy, torch.optim.SGD(policy.parameters(), lr=0.1), streams)
    assert len(seen) == 3 and seen[0] is streams and seen[1] is seen[2] is streams.top_up
    torch.rand(3, generator=plain.data)  # the one draw of an episode without top-ups
    assert torch.equal(streams.data.get_state(), plain.data.get_state())
    # and the top-up streams are checkpointed and restored
    state = streams.state()
    again = Streams.from_seed(3)
    again.load_state(state)
    assert torch.equal(again.extra().data.get_state(), streams.top_up.data.get_state())
    old = {k: v for k, v in state.items() if not k.startswith("top_up:")}  # a checkpoint from before
    fresh = Streams.from_seed(3)
    fresh.load_state(old)
    assert fresh.top_up is None
    assert torch.equal(fresh.extra().data.get_state(), Streams.from_seed(3).extra().data.get_state())
