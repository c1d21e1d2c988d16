"""TPO inside verl (integrations.verl_plugin), in verl's own environment: verl pins
transformers<5.11, below the harness's llm and test extras, so these tests skip in the
default one. To run them:

    python -m venv /path/verl && /path/verl/bin/pip install torch==2.13.0
    /path/verl/bin/pip install -e '.[verl]' pytest
    /path/verl/bin/python -m pytest -o addopts="" tests/test_verl.py

`import verl` loads the `verl.plugins` entry point, which registers loss_mode=tpo and
adv_estimator=tpo; the loss on verl's tensors equals the harness's TPO.loss on the raw
scores; micro-batches (and 2 ranks) scaled by verl's global-batch info give the batch's
loss; configurations that would reorder or split groups are refused, among them verl 0.9's
default trainer, whose own reorder at 2 ranks (built from verl's functions) splits groups."""
import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl", reason="verl is not installed (it needs an environment of its "
                                          "own: see this file's docstring)")

from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn  # noqa: E402

from tpo_bench.algorithms._common import standardise  # noqa: E402
from tpo_bench.algorithms.tpo import TPO  # noqa: E402
from tpo_bench.contract.batch import Batch  # noqa: E402

N, K, T = 4, 3, 6


def actor(global_batch_info=None, **kw):
    """verl's own ActorConfig, as its actor hands it to the loss (global_batch_info filled
    per micro-batch, as verl's ppo_loss does)."""
    from verl.workers.config import ActorConfig
    base = dict(strategy="fsdp", rollout_n=K, ppo_mini_batch_size=N, ppo_micro_batch_size_per_gpu=2 * K)
    base.update(kw)
    cfg = ActorConfig(**base)
    cfg.global_batch_info.update(global_batch_info or {})
    return cfg


def groups(seed=0):
    """verl's layout: K responses of each prompt consecutive, uid per prompt; scores at
    the last response token (an outcome reward)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N * K,), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
    old = -torch.rand(N * K, T, generator=g, dtype=torch.float64) * 2 * mask
    logp = (old + 0.3 * torch.randn(N * K, T, generator=g, dtype=torch.float64)) * mask
    scores = torch.randint(0, 3, (N * K,), generator=g).double()
    rewards = torch.zeros(N * K, T, dtype=torch.float64)
    rewards[torch.arange(N * K), lengths - 1] = scores
    uid = np.array([f"prompt-{i}" for i in range(N) for _ in range(K)], dtype=object)
    return dict(old=old, logp=logp, mask=mask, scores=scores, rewards=rewards, uid=uid)


def harness_loss(d):
    m = d["mask"].bool().view(N, K, T)
    s = d["scores"].view(N, K)
    batch = Batch.sampled_group(d["old"].view(N, K, T), s.unsqueeze(-1) * m, s >= 2, scores=s, mask=m)
    return TPO().loss(batch, d["logp"].view(N, K, T)).loss


def test_import_verl_registers_the_plugin():
    assert get_policy_loss_fn("tpo").__module__ == "tpo_bench.integrations.verl_plugin"
    assert get_adv_estimator_fn("tpo").__module__ == "tpo_bench.integrations.verl_plugin"


def test_the_advantage_is_the_score_standardised_per_uid_in_any_group_and_slot_order():
    d = groups()
    g = torch.Generator().manual_seed(1)
    perm = torch.cat([int(i) * K + torch.randperm(K, generator=g) for i in torch.randperm(N, generator=g)])
    adv, ret = get_adv_estimator_fn("tpo")(d["rewards"][perm], d["mask"][perm], d["uid"][perm.numpy()])
    want = standardise(d["scores"].view(N, K)).reshape(-1)[perm]
    assert torch.equal(adv, want.unsqueeze(-1) * d["mask"][perm]) and torch.equal(ret, adv)


def test_the_loss_is_the_harness_loss_on_raw_scores():
    d = groups()
    adv, _ = get_adv_estimator_fn("tpo")(d["rewards"], d["mask"], d["uid"])
    loss, metrics = get_policy_loss_fn("tpo")(d["old"], d["logp"], adv, d["mask"], "token-mean", actor())
    want = harness_loss(d)
    assert abs(loss.item() - want.item()) <= 1e-12 and abs(want.item()) > 1e-3
    assert "actor/tpo_q_fail" in metrics


def test_micro_batches_scaled_by_the_global_batch_sum_to_the_mini_batch_loss():
    d = groups()
    adv, _ = get_adv_estimator_fn("tpo")(d["rewards"], d["mask"], d["uid"])
    cfg = actor(global_batch_info={"global_batch_size": N * K, "dp_size": 1})
    total = 0.0
    for part in (slice(0, 2 * K), slice(2 * K, 3 * K), slice(3 * K, N * K)):  # uneven: 2, 1, 1 groups
        loss, _ = get_policy_loss_fn("tpo")(d["old"][part], d["logp"][part], adv[part], d["mask"][part],
                                           "token-mean", cfg)
        total = total + loss
    assert abs(total.item() - harness_loss(d).item()) <= 1e-12


@pytest.mark.parametrize("kw,message", [
    (dict(shuffle=True), "actor.shuffle=True"),
    (dict(use_dynamic_bsz=True), "use_dynamic_bsz=True"),
    (dict(ppo_micro_batch_size_per_gpu=K + 1), "not a multiple of rollout.n=3"),
])
def test_actor_settings_that_split_groups_are_refused(kw, message):
    d = groups()
    adv, _ = get_adv_estimator_fn("tpo")(d["rewards"], d["mask"], d["uid"])
    with pytest.raises(ValueError, match=message):
        get_policy_loss_fn("tpo")(d["old"], d["logp"], adv, d["mask"], "token-mean", actor(**kw))


def test_reordered_rows_and_rollout_weights_are_refused():
    d = groups()
    adv, _ = get_adv_estimator_fn("tpo")(d["rewards"], d["mask"], d["uid"])
    fn = get_policy_loss_fn("tpo")
    perm = torch.tensor([1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    perm[2], perm[3] = 3, 2  # a row of group 1 swapped into group 0
    assert adv[2].sum() != adv[3].sum()
    with pytest.raises(ValueError, match="not consecutive groups"):
        fn(d["old"][perm], d["logp"][perm], adv[perm], d["mask"][perm], "token-mean", actor())
    with pytest.raises(ValueError, match="not whole groups"):
        fn(d["old"][:4], d["logp"][:4], adv[:4], d["mask"][:4], "token-mean", actor())
    with pytest.raises(ValueError, match="rollout importance-sampling"):
        fn(d["old"], d["logp"], adv, d["mask"], "token-mean", actor(), rollout_is_weights=torch.ones_like(adv))


def test_the_trainer_config_check():
    from tpo_bench.integrations.verl_plugin import check_trainer_config
    ok = {"trainer": {"use_v1": False, "balance_batch": False}, "algorithm": {"adv_estimator": "tpo"},
          "actor_rollout_ref": {"actor": {"shuffle": False, "use_dynamic_bsz": False,
                                          "ppo_micro_batch_size_per_gpu": 2 * K},
                                "rollout": {"n": K}}}
    check_trainer_config(ok)
    with pytest.raises(ValueError, match="balance_batch=True"):
        check_trainer_config({**ok, "trainer": {"use_v1": False}})  # verl's default is True
    with pytest.raises(ValueError, match="trainer.use_v1=True"):
        check_trainer_config({**ok, "trainer": {"balance_batch": False}})  # verl 0.9's default trainer
    with pytest.raises(ValueError, match="adv_estimator='grpo'"):
        check_trainer_config({**ok, "algorithm": {"adv_estimator": "grpo"}})
    with pytest.raises(ValueError, match="not a multiple of rollout.n=4"):
        check_trainer_config({**ok, "actor_rollout_ref": {**ok["actor_rollout_ref"], "rollout": {"n": 4}}})


def seqlen_reorder(lengths: torch.Tensor, ranks: int) -> list[int]:
    """The row order verl 0.9's default trainer gives a step's batch before dispatching it to
    `ranks` data-parallel ranks in equal consecutive shares (its _balance_batch, which
    trainer.balance_batch does not switch off), built from verl's own functions."""
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions
    parts = get_seqlen_balanced_partitions(calculate_workload(lengths), k_partitions=ranks, equal_size=True)
    return [j for part in parts for j in part]


def test_verl_default_reorder_at_two_ranks_splits_groups_and_is_refused():
    from tpo_bench.integrations.verl_plugin import check_trainer_config
    d = groups()
    order = seqlen_reorder(d["mask"].sum(-1).long(), ranks=2)
    uid = d["uid"][order]
    shares = [set(uid[: N * K // 2]), set(uid[N * K // 2:])]
    assert shares[0] & shares[1], shares  # a prompt's rows on both ranks
    with pytest.raises(ValueError, match="not consecutive groups of rollout.n=3.*trainer.use_v1=False"):
        get_adv_estimator_fn("tpo")(d["rewards"][order], d["mask"][order], uid)
    default = {"trainer": {"balance_batch": False}, "algorithm": {"adv_estimator": "tpo"},
               "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": K}, "rollout": {"n": K}}}
    with pytest.raises(ValueError, match="trainer.use_v1=True.*set trainer.use_v1=False"):
        check_trainer_config(default)
    check_trainer_config({**default, "trainer": {"use_v1": False, "balance_batch": False}})


def test_rows_of_tied_scores_swapped_between_groups_are_refused_by_uid():
    """Equal standardised scores swapped between two groups pass the loss's score check
    (each block still sums to 0) but change the loss; the advantage sees the uids."""
    d = groups()
    d["scores"] = torch.tensor([0, 1, 2] * N, dtype=torch.float64)  # every group: the same u pattern
    d["rewards"] = torch.zeros_like(d["rewards"])
    d["rewards"][torch.arange(N * K), d["mask"].sum(-1).long() - 1] = d["scores"]
    perm = torch.arange(N * K)
    perm[0], perm[K] = K, 0  # slot 0 of group 0 and of group 1 trade places
    adv, _ = get_adv_estimator_fn("tpo")(d["rewards"], d["mask"], d["uid"])
    loss, _ = get_policy_loss_fn("tpo")(d["old"][perm], d["logp"][perm], adv[perm], d["mask"][perm],
                                        "token-mean", actor())
    assert abs(loss.item() - harness_loss(d).item()) > 1e-6  # a different loss, accepted
    with pytest.raises(ValueError, match="not consecutive groups"):
        get_adv_estimator_fn("tpo")(d["rewards"][perm], d["mask"][perm], d["uid"][perm.numpy()])


def test_two_ranks_of_the_legacy_trainer_average_to_the_batch_loss():
    """trainer.use_v1=False, balance_batch=False: rows stay in rollout order and each of 2
    ranks gets a consecutive share of whole groups; verl averages the ranks' gradients, so
    the mean of their scaled losses is the harness's loss on the whole batch."""
    d = groups()
    adv, _ = get_adv_estimator_fn("tpo")(d["rewards"], d["mask"], d["uid"])
    cfg = actor(global_batch_info={"global_batch_size": N * K, "dp_size": 2})
    half = N * K // 2
    losses = [get_policy_loss_fn("tpo")(d["old"][r], d["logp"][r], adv[r], d["mask"][r], "token-mean", cfg)[0]
              for r in (slice(0, half), slice(half, N * K))]
    assert abs(sum(losses).item() / 2 - harness_loss(d).item()) <= 1e-12
