"""Token-sequence task (science §Token sequences): targets, rewards, model, generation, partition."""
import math

import pytest
import torch

from tpo_bench.bench.optim import MuonNAdam, partition
from tpo_bench.contract.batch import Request
from tpo_bench.contract.rng import Streams
import tpo_bench.tasks.seq as seq_module
from tpo_bench.tasks.seq import REWARDS, TARGETS, SeqTask, target_tokens, token_rewards
from tpo_bench.tasks.transformer import Transformer



def req(k: int, level: str = "sequence") -> Request:
    return Request(name="test", k=k, level=level, needs="sample" if k == 1 else "sample_group")


PROMPT = torch.tensor([[0, 1, 1, 3]])


@pytest.mark.parametrize("target,expected", [
    ("copy", [0, 1, 1, 3]), ("flip", [3, 2, 2, 0]),
    ("reverse_copy", [3, 1, 1, 0]), ("reverse_flip", [0, 2, 2, 3]),
])
def test_targets(target, expected):
    assert target_tokens(PROMPT, target, vocab_size=4).tolist() == [expected]


CORRECT = torch.tensor([[True, True, False, True], [True, True, True, True],
                        [False, True, True, True]])


@pytest.mark.parametrize("reward,expected", [
    ("bag_of_tokens", [[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1]]),
    ("sequential", [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]),
    ("terminal", [[0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]),
])
def test_rewards(reward, expected):
    assert token_rewards(CORRECT, reward).tolist() == expected


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reward", REWARDS)
def test_each_target_and_reward_scores_a_rollout(target, reward, monkeypatch):
    """Every combination: scores are the token-reward means, success is exact match,
    error is 1 - mean reward, and writing the target itself earns full reward."""
    task = SeqTask(target=target, reward=reward, sequence_length=5, vocab_size=3, batch_size=6)
    s = Streams.from_seed(3)
    ro = task.rollout(task.make_policy(s.init), req(4), s)
    b = ro.batch
    prompts, tokens = b.obs.prompts, b.obs.answers
    correct = tokens == target_tokens(prompts, target, 3).unsqueeze(1)
    assert torch.equal(b.token_rewards, token_rewards(correct, reward))
    assert torch.allclose(b.scores, b.token_rewards.mean(-1))
    assert torch.equal(b.success, correct.all(-1))
    assert ro.error == pytest.approx(1 - b.token_rewards.mean().item())
    assert ro.rollouts == 6 * 4 and b.advantages is None
    # A policy that writes the target, spelled out here from science §Token sequences (reverse_: the
    # prompt backwards; flip: V - 1 - token), earns full reward and succeeds; one that
    # gets every token wrong earns nothing. Both through the task's own rollout.
    def answer(p):
        y = p.flip(-1) if target.startswith("reverse_") else p
        return 2 - y if target.endswith("flip") else y

    for shift, reward_mean in ((0, 1.0), (1, 0.0)):
        def generate_seeds(policies, prompts, k, gens):  # prompts [S, B, H]
            tokens = ((answer(prompts) + shift) % 3).unsqueeze(2).expand(-1, -1, k, -1)
            return tokens, torch.full(tokens.shape, -1.0)

        monkeypatch.setattr(seq_module, "generate_seeds", generate_seeds)
        ro = task.rollout(task.make_policy(s.init), req(4), s)
        assert float(ro.reward_mean) == reward_mean and float(ro.error) == 1 - reward_mean
        assert torch.equal(ro.batch.scores, torch.full((6, 4), reward_mean))
        assert bool(ro.batch.success.all()) is (shift == 0) and bool(ro.batch.success.any()) is (shift == 0)


def test_single_sample_advantage_is_batch_mean_baseline_per_position():
    task = SeqTask(reward="bag_of_tokens", sequence_length=4, vocab_size=2, batch_size=50)
    s = Streams.from_seed(0)
    b = task.rollout(task.make_policy(s.init), req(1), s).batch
    assert b.logp_old.shape == (50, 1, 4) and b.obs.answers.shape == (50, 1, 4)
    assert torch.allclose(b.advantages, b.token_rewards - b.token_rewards.mean(0, keepdim=True))
    assert torch.allclose(b.advantages.mean(0), torch.zeros(1, 4), atol=1e-6)
    assert torch.equal(b.scores, b.token_rewards.mean(-1))
    correct = b.obs.answers == target_tokens(b.obs.prompts, task.target, 2).unsqueeze(1)
    assert torch.equal(b.token_rewards, token_rewards(correct, task.reward))
    assert torch.equal(b.success, correct.all(-1))
    assert (task.logprobs(task.make_policy(Streams.from_seed(0).init), b) - b.logp_old).abs().max() < 1e-5


def test_cached_generation_matches_full_forward():
    task = SeqTask(sequence_length=7, vocab_size=5, batch_size=9)
    s = Streams.from_seed(1)
    policy = task.make_policy(s.init)
    ro = task.rollout(policy, req(3), s)
    with torch.no_grad():
        full = task.logprobs(policy, ro.batch)
    assert full.shape == (9, 3, 7)
    assert (full - ro.batch.logp_old).abs().max() < 1e-5


def test_prompts_and_init_depend_on_seed_only():
    task = SeqTask(sequence_length=4, batch_size=5)
    a, b = Streams.from_seed(7), Streams.from_seed(7)
    pa, pb = task.make_policy(a.init), task.make_policy(b.init)
    for x, y in zip(pa.parameters(), pb.parameters()):
        assert torch.equal(x, y)
    # different group sizes consume the action stream differently, not the data stream
    ra = task.rollout(pa, req(8), a)
    rb = task.rollout(pb, req(1), b)
    assert torch.equal(ra.batch.obs.prompts, rb.batch.obs.prompts)
    c = Streams.from_seed(8)
    assert not torch.equal(task.rollout(pa, req(1), c).batch.obs.prompts, ra.batch.obs.prompts)


def test_initialisation_follows_spec():
    g = torch.Generator().manual_seed(0)
    m = Transformer(vocab_size=16, max_len=20, d_model=64).init_(g)
    blk = m.blocks[0]
    for w, fan_in in [(blk.w1, 64), (blk.w2, 256), (blk.wq, 64), (blk.wo, 64), (m.head_w, 64)]:
        std = 1 / math.sqrt(fan_in)
        assert w.std().item() == pytest.approx(std, rel=0.1)
        # truncated at 2 sigma of the *pre-correction* normal (2 * std / 0.8796)
        assert w.abs().max().item() <= 2 * std / 0.8796 + 1e-6
        assert w.abs().max().item() > 1.5 * std
    assert m.tok_emb.std().item() == pytest.approx(1 / 8, rel=0.1)
    assert m.tok_emb.abs().max().item() > 2.3 / 8  # plain normal: not truncated
    assert m.pos_emb.std().item() == pytest.approx(0.02, rel=0.15)
    for b in (blk.bq, blk.bo, blk.b1, m.head_b, blk.ln1_bias):
        assert torch.count_nonzero(b) == 0
    assert torch.equal(blk.ln1_scale, torch.ones(64))


def test_parameter_partition_matches_reference_shapes():
    m = Transformer(vocab_size=2, max_len=20)
    muon, nadam = partition(list(m.named_parameters()))
    shapes = dict((n, tuple(p.shape)) for n, p in m.named_parameters())
    for name in ("bq", "bk", "bv"):
        assert f"blocks.0.{name}" in muon and shapes[f"blocks.0.{name}"] == (2, 32)
    for name in ("wq", "wk", "wv", "wo", "bo"):
        assert f"blocks.1.{name}" in nadam
    for name in ("blocks.0.w1", "blocks.0.w2", "head_w", "tok_emb", "pos_emb"):
        assert name in muon
    for name in ("blocks.0.b1", "blocks.0.b2", "head_b", "lnf_scale", "blocks.1.ln2_bias"):
        assert name in nadam
    assert shapes["tok_emb"] == (2, 64) and shapes["pos_emb"] == (20, 64)
    assert shapes["blocks.0.w1"] == (64, 256)  # (in, out): fan_in on the first axis
    opt = MuonNAdam(m.named_parameters(), lr=1e-3)
    assert sum(len(g["params"]) for g in opt.param_groups) == len(shapes)


def test_config_validation_names_key_and_choices():
    with pytest.raises(ValueError, match=r"task.target='mirror'.*reverse_copy"):
        SeqTask(target="mirror")
    with pytest.raises(ValueError, match=r"task.reward='dense'.*bag_of_tokens"):
        SeqTask(reward="dense")
    with pytest.raises(ValueError, match="task.batch_size"):
        SeqTask(batch_size=0)
    with pytest.raises(ValueError, match="task.vocab_size"):
        SeqTask(vocab_size=1)


def test_shared_prefix_forward_equals_full_forward_with_gradients():
    """Training re-scores K answers per prompt with the prompt computed once; logits and
    gradients must equal those of K full forwards of prompt + answer."""
    g = torch.Generator().manual_seed(0)
    m = Transformer(vocab_size=3, max_len=20).init_(g)
    B, K, P, S = 4, 3, 10, 9
    prefix = torch.randint(0, 3, (B, P), generator=g)
    suffix = torch.randint(0, 3, (B * K, S), generator=g)
    full = m(torch.cat([prefix.repeat_interleave(K, 0), suffix], 1))
    first, rest = m.forward_shared_prefix(prefix, suffix, K)
    assert (full[:, P - 1] - first.repeat_interleave(K, 0)).abs().max() < 1e-5
    assert (full[:, P:] - rest).abs().max() < 1e-5
    w = torch.randn(full[:, P - 1:].shape, generator=g)
    grads_full = torch.autograd.grad((full[:, P - 1:] * w).sum(), list(m.parameters()))
    shared = torch.cat([first.repeat_interleave(K, 0).unsqueeze(1), rest], 1)
    grads_shared = torch.autograd.grad((shared * w).sum(), list(m.parameters()))
    for a, b in zip(grads_full, grads_shared):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_one_token_answers():
    task = SeqTask(sequence_length=1, batch_size=3)
    s = Streams.from_seed(0)
    policy = task.make_policy(s.init)
    ro = task.rollout(policy, req(4), s)
    assert (task.logprobs(policy, ro.batch) - ro.batch.logp_old).abs().max() < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_generation_has_no_host_sync():
    """device=cuda: sampling an episode (the per-token loop) never waits for the GPU."""
    task = SeqTask(sequence_length=10, batch_size=100)
    streams = Streams.from_seed(0, "cuda")
    policy = task.make_policy(streams.init).to("cuda")
    task.rollout(policy, req(8), streams)  # warm-up outside the check
    torch.cuda.set_sync_debug_mode("error")
    try:
        ro = task.rollout(policy, req(8), streams)
        logp = task.logprobs(policy, ro.batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert logp.device.type == "cuda" and float(ro.error) <= 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_batched_episode_reads_the_device_once(monkeypatch):
    """device=cuda, seed-batched (bench.engine): a whole episode of S seeds -- the stacked
    sampling and log-probs, PG's loss (which reports no metric of its own: an algorithm's
    .item()s are its own), backward, four MuonNAdam steps each, every row's bookkeeping --
    waits for the GPU once, where engine.read_rows reads all S rows together."""
    from tpo_bench.algorithms.pg import PG
    from tpo_bench.bench import engine

    S, task = 3, SeqTask(sequence_length=10, batch_size=100)
    streams = [Streams.from_seed(s, "cuda") for s in range(S)]
    policies = [task.make_policy(st.init).to("cuda") for st in streams]
    opts = [MuonNAdam(list(p.parameters()), lr=1e-3) for p in policies]
    read_rows, reads = engine.read_rows, []

    def read_once(rows):  # the one read allowed, counted
        reads.append(len(rows))
        torch.cuda.set_sync_debug_mode(0)
        try:
            return read_rows(rows)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    monkeypatch.setattr(engine, "read_rows", read_once)
    engine.train_episodes(task, PG(), req(1), policies, opts, streams)  # warm-up outside the check
    reads.clear()
    torch.cuda.set_sync_debug_mode("error")
    try:
        rows = engine.train_episodes(task, PG(), req(1), policies, opts, streams)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert reads == [S] and all(isinstance(row["grad_norm"], float) for row in rows)
