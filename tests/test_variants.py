"""Ablations, token-level grouping and matching modes (science §Update rules, §Token sequences)."""
import copy
import functools
import json
import math

import pytest
import torch

from tpo_bench.algorithms._common import standardise
from tpo_bench.algorithms.grpo import GRPO, grpo_advantages
from tpo_bench.algorithms.pg import PG
from tpo_bench.algorithms.tpo import TPO, tpo_target
from tpo_bench.contract.batch import Batch, Request
from tpo_bench.contract.rng import Streams
from tpo_bench.bench.build import ConfigError, build
from tpo_bench.bench.engine import train_episode
from tpo_bench.bench.optim import build_optimizer
import conftest
from conftest import REPO
from tpo_bench.tasks.seq import SeqTask, target_tokens


@functools.lru_cache(maxsize=None)
def composed(overrides: tuple[str, ...]) -> dict:
    return conftest.compose(*overrides)


def compose(*overrides: str) -> dict:
    """conftest.compose, each command line composed once for the module (Hydra's compose
    is most of these tests' time; several tests build the same variant); a copy each time,
    so what build does with it stays in that test."""
    return copy.deepcopy(composed(overrides))


def one_step_batch(logp_old, scores):
    scores = torch.as_tensor(scores, dtype=torch.float64)
    return Batch.sampled_group(torch.as_tensor(logp_old, dtype=torch.float64), scores, scores >= 1)


# ------------------------------------------------------------------ conf/algo variants

@pytest.mark.parametrize("name,impl,fields", [
    ("tpo_no_anchor", "TPO", {"anchor": False, "k": 8}),
    ("tpo_token", "TPO", {"level": "token", "anchor": True}),
    ("grpo_no_kl", "GRPO", {"kl_coef": 0.0, "mask_zero_variance": False}),
    ("grpo_masked", "GRPO", {"kl_coef": 0.04, "mask_zero_variance": True}),
    ("grpo_token", "GRPO", {"level": "token", "kl_coef": 0.04}),
    ("group_pg", "PG", {"advantage": "group", "k": 8, "eta": 1.0}),
])
def test_each_variant_is_a_parameter_of_a_core_algorithm(name, impl, fields):
    spec = build(compose(f"algo={name}", "task=reversal_v2"))
    assert type(spec.algo).__name__ == impl and spec.algo_name == name
    for key, value in fields.items():
        assert getattr(spec.algo, key) == value
    assert spec.run_dir.parts[-3] == name


@pytest.mark.slow  # takes seconds in process
def test_every_conf_algo_builds():
    for yaml in sorted((REPO / "conf" / "algo").glob("*.yaml")):
        if yaml.stem != "ce":
            build(compose(f"algo={yaml.stem}", "task=reversal_v2"))


def test_supervised_oracle_refused_on_sequence_tasks():
    with pytest.raises(ConfigError, match="ce is a supervised oracle"):
        build(compose("algo=ce", "task=reversal_v2"))


# ------------------------------------------------------------------ variant losses

def test_no_anchor_target_ignores_p_old():
    logp_old = torch.log(torch.tensor([[0.7, 0.2, 0.1]], dtype=torch.float64))
    scores = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    q = tpo_target(logp_old, scores, eta=2.0, anchor=False)
    assert torch.allclose(q, torch.softmax(standardise(scores) / 2.0, -1))
    # all-fail group: uniform, not p_old
    q0 = tpo_target(logp_old, torch.zeros(1, 3, dtype=torch.float64), anchor=False)
    assert torch.allclose(q0, torch.full((1, 3), 1 / 3, dtype=torch.float64))
    z = logp_old.clone().requires_grad_(True)
    TPO(k=3, anchor=False, eta=2.0).loss(one_step_batch(logp_old, scores), z.unsqueeze(-1)).loss.backward()
    assert torch.allclose(z.grad, torch.softmax(z, -1).detach() - q)


def test_group_pg_weights_are_u_over_eta_summed_over_group():
    logp_old = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]], dtype=torch.float64))
    scores = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5]], dtype=torch.float64)
    z = logp_old.clone().requires_grad_(True)
    out = PG(k=3, advantage="group", eta=0.5).loss(one_step_batch(logp_old, scores), z.unsqueeze(-1))
    u = standardise(scores)
    assert out.loss.item() == pytest.approx(-((u / 0.5) * logp_old).sum(-1).mean().item())
    out.loss.backward()
    assert torch.allclose(z.grad, -(u / 0.5) / 2)  # mean over the 2 groups
    assert torch.equal(z.grad[1], torch.zeros(3, dtype=torch.float64))  # no signal in a flat group


def test_grpo_masked_drops_flat_groups_and_renormalises():
    logp_old = torch.log(torch.full((3, 2), 0.5, dtype=torch.float64))
    scores = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    d = torch.tensor([[0.1, -0.1], [0.3, 0.3], [-0.3, 0.2]], dtype=torch.float64)
    logp = (logp_old + d).unsqueeze(-1)
    A = grpo_advantages(scores)
    r = d.exp()
    per_group = (torch.minimum(r * A, r.clamp(0.8, 1.2) * A) - 0.04 * (torch.exp(-d) + d - 1)).sum(-1)
    masked = GRPO(k=2, mask_zero_variance=True).loss(one_step_batch(logp_old, scores), logp)
    # only group 0 is informative: its term alone, divided by 1 (not by 3)
    assert masked.loss.item() == pytest.approx(-per_group[0].item(), rel=1e-10)
    plain = GRPO(k=2).loss(one_step_batch(logp_old, scores), logp)
    assert plain.loss.item() == pytest.approx(-per_group.mean().item(), rel=1e-10)
    # the KL of flat groups is masked too: no gradient reaches them
    z = logp.clone().requires_grad_(True)
    GRPO(k=2, mask_zero_variance=True).loss(one_step_batch(logp_old, scores), z).loss.backward()
    assert torch.equal(z.grad[1:], torch.zeros_like(z.grad[1:]))
    # all groups flat: divided by at least 1, loss 0
    flat = GRPO(k=2, mask_zero_variance=True).loss(one_step_batch(logp_old, torch.zeros(3, 2)), logp)
    assert flat.loss.item() == 0.0


def test_grpo_masked_renormalisation_by_informative_count():
    logp_old = torch.log(torch.full((4, 2), 0.5, dtype=torch.float64))
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    d = torch.full((4, 2), 0.05, dtype=torch.float64)
    logp = (logp_old + d).unsqueeze(-1)
    out = GRPO(k=2, kl_coef=0.0, mask_zero_variance=True).loss(one_step_batch(logp_old, scores), logp)
    A = grpo_advantages(scores)
    per_group = torch.minimum(d.exp() * A, d.exp().clamp(0.8, 1.2) * A).sum(-1)
    assert out.loss.item() == pytest.approx(-(per_group[0] + per_group[1]).item() / 2, rel=1e-10)


# ------------------------------------------------------------------ token-level groups

def token_rollout(reward="bag_of_tokens", V=2, H=6, B=40, K=8, seed=0):
    task = SeqTask(reward=reward, sequence_length=H, vocab_size=V, batch_size=B)
    streams = Streams.from_seed(seed)
    policy = task.make_policy(streams.init)
    return task, policy, task.rollout(policy, Request("tpo_token", K, "token", "action_group"), streams)


def test_token_candidates_keep_duplicates_and_candidate_0_is_behaviour():
    task, policy, ro = token_rollout(V=2, K=8)
    obs = ro.batch.obs
    prompts, behaviour, cands = obs.prompts, obs.behaviour, obs.candidates
    assert cands.shape == (40, 6, 8) and ro.batch.logp_old.shape == (240, 8, 1)
    assert torch.equal(cands[:, :, 0], behaviour)  # the trajectory continues with candidate 0
    # V = 2, K = 8: duplicates are certain and kept as separate group members
    assert all(len(set(g.tolist())) < 8 for g in cands.reshape(-1, 8))
    # the candidates' old log-probs are their tokens' log-probs under the policy at that state
    with torch.no_grad():
        logits = policy(torch.cat([prompts, behaviour], 1)[:, :-1])[:, 5:]
    expect = torch.log_softmax(logits, -1).gather(-1, cands).reshape(240, 8, 1)
    assert (expect - ro.batch.logp_old).abs().max() < 1e-5
    # error: the behaviour trajectories' (candidate 0's) per-token error
    correct = behaviour == target_tokens(prompts, "reverse_copy", 2)
    assert ro.error == pytest.approx(1 - correct.float().mean().item(), abs=1e-7)
    assert ro.rollouts == 40


def test_token_candidates_are_iid_draws_from_the_policy():
    _, policy, ro = token_rollout(V=4, H=3, B=400, K=8, seed=1)
    obs = ro.batch.obs
    prompts, behaviour, cands = obs.prompts, obs.behaviour, obs.candidates
    with torch.no_grad():
        p = torch.softmax(policy(torch.cat([prompts, behaviour], 1)[:, :-1])[:, 2:], -1)
    counts = torch.nn.functional.one_hot(cands, 4).float().mean(2)  # [B, H, V] empirical
    assert (counts.mean((0, 1)) - p.mean((0, 1))).abs().max() < 0.02


def test_sequential_dead_states_score_zero_and_give_q_equal_p_old():
    task, policy, ro = token_rollout(reward="sequential", V=4, H=6, B=60, K=8, seed=2)
    obs = ro.batch.obs
    prompts, behaviour, cands = obs.prompts, obs.behaviour, obs.candidates
    correct = behaviour == target_tokens(prompts, "reverse_copy", 4)
    alive = torch.cat([torch.ones(60, 1, dtype=torch.bool), correct[:, :-1].cumprod(-1).bool()], 1)
    scores = ro.batch.scores.view(60, 6, 8)
    assert (~alive).any() and alive[:, 1:].any()
    assert torch.equal(scores[~alive], torch.zeros_like(scores[~alive]))
    live_correct = (cands == target_tokens(prompts, "reverse_copy", 4).unsqueeze(-1)).float()
    assert torch.equal(scores[alive], live_correct[alive])
    logp_old = ro.batch.seq_logp_old().view(60, 6, 8)
    q = tpo_target(ro.batch.seq_logp_old(), ro.batch.scores).view(60, 6, 8)
    p_old = torch.softmax(logp_old, -1)
    assert torch.allclose(q[~alive], p_old[~alive], atol=1e-6)


@pytest.mark.slow  # long in process
def test_token_level_loss_runs_over_all_states():
    task, policy, ro = token_rollout(reward="bag_of_tokens")
    logp = task.logprobs(policy, ro.batch)
    assert logp.shape == ro.batch.logp_old.shape
    out = TPO(level="token").loss(ro.batch, logp)
    q = tpo_target(ro.batch.seq_logp_old(), ro.batch.scores)
    expected = -(q * torch.log_softmax(logp[..., 0], -1)).sum(-1).mean()  # mean over B*H states
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    opt = build_optimizer("muon_nadam", list(policy.parameters()), lr=1e-3)
    row = train_episode(task, TPO(level="token"), Request("tpo_token", 8, "token", "action_group"),
                        policy, opt, Streams.from_seed(5))
    assert row["grad_norm"] > 0 and math.isfinite(row["loss"])


@pytest.mark.parametrize("algo", ["tpo_token", "grpo_token"])
def test_token_level_refuses_terminal_reward(algo):
    with pytest.raises(ConfigError, match="algo.level=token.*task.reward=terminal"):
        build(compose(f"algo={algo}", "task=reverse_h7"))


def test_unknown_level_refused():
    with pytest.raises(ConfigError, match="algo.level='word' is not one of sequence, token"):
        build(compose("algo=tpo", "algo.level=word"))


# ------------------------------------------------------------------ matching modes

@pytest.mark.parametrize("algo", ["pg", "ppo", "dg"])
def test_interaction_matching_scales_single_sample_methods(algo):
    prompts = build(compose(f"algo={algo}", "task=reverse_h8"))
    inter = build(compose(f"algo={algo}", "task=reverse_h8", "match=interactions"))
    assert prompts.task.batch_size == 100 and inter.task.batch_size == 800
    assert inter.lr == pytest.approx(1e-3 * math.sqrt(8))
    assert inter.effective == {"batch_size_effective": 800, "lr_effective": pytest.approx(1e-3 * math.sqrt(8))}
    # the configured B stays in the config (and the hash keeps the two modes apart)
    assert inter.config["task"]["batch_size"] == 100 and inter.config_hash != prompts.config_hash
    assert "800 prompts" in inter.notes[0] and "both optimizer branches" in inter.notes[1]


@pytest.mark.parametrize("algo", ["tpo", "grpo", "group_pg", "tpo_token"])
def test_interaction_matching_leaves_grouped_and_token_methods(algo):
    spec = build(compose(f"algo={algo}", "task=reversal_v4", "match=interactions", "match_k=4"))
    assert spec.task.batch_size == 100 and spec.lr == 1e-3
    assert "unchanged" in spec.notes[0]
    # the same run as the prompt-matched one: one hash, one directory, recorded as prompts
    prompts = build(compose(f"algo={algo}", "task=reversal_v4", "match_k=4"))
    assert spec.config["match"] == "prompts"
    assert (spec.config_hash, spec.run_dir) == (prompts.config_hash, prompts.run_dir)


def test_matching_optimizer_gets_scaled_lr_on_both_branches():
    spec = build(compose("algo=dg", "task=reverse_h7", "match=interactions"))
    policy = spec.task.make_policy(Streams.from_seed(0).init)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    assert len(opt.param_groups) == 2
    assert all(g["lr"] == pytest.approx(1e-3 * math.sqrt(8)) for g in opt.param_groups)


def test_bad_match_mode_refused():
    with pytest.raises(ConfigError, match="match='both' is not one of prompts, interactions"):
        build(compose("match=both"))


# ------------------------------------------------------------------ DG epochs

def test_dg_defaults_to_one_epoch_and_warns_above():
    assert build(compose("algo=dg")).algo.epochs == 1
    with pytest.warns(UserWarning, match="degrades with more than one epoch"):
        spec = build(compose("algo=dg", "algo.epochs=4"))
    assert spec.algo.epochs == 4


@pytest.mark.parametrize("algo", ["tpo", "tpo_no_anchor", "group_pg", "dg"])
def test_eta_is_a_knob(algo):
    assert build(compose(f"algo={algo}", "algo.eta=0.25")).algo.eta == 0.25


@pytest.mark.parametrize("overrides,rewrites", [
    (["algo=pg", "match=interactions"], [("task.batch_size", 64, 512), ("optim.lr", 1e-3, pytest.approx(1e-3 * math.sqrt(8)))]),
    (["algo=grpo", "match=interactions"], [("match", "interactions", "prompts")]),
    (["task=tabular_multi", "algo=dapo"], [("algo.epochs", 4, 1), ("algo.dynamic_sampling", 4, 0)]),
    (["algo=dapo"], []),  # the sequence tasks replace groups one by one
    (["algo=pg"], []),
])
def test_every_value_build_rewrites_is_stated(overrides, rewrites):
    """Each value that runs in place of the one the config gives: key, given, used, why,
    and a line said when the run starts."""
    spec = build(compose(*overrides))
    assert [(r["key"], r["given"], r["used"]) for r in spec.rewrites] == rewrites
    assert all(r["why"] for r in spec.rewrites) and len(spec.notes) == len(rewrites)
    for r, note in zip(spec.rewrites, spec.notes):
        assert note.startswith(f"{r['key']}={r['given']} runs as {r['key']}={r['used']}: ")


@pytest.mark.slow  # a run asks git for its commit
def test_the_rewrites_are_in_the_runs_summary_and_printed(tmp_path, capsys):
    from tpo_bench.bench.runner import run

    spec = build(compose("task=tabular_single", "task.episodes=2", f"output_root={tmp_path}"))
    assert run(spec)["status"] == "completed"
    summary = json.loads((spec.run_dir / "summary.json").read_text())
    assert summary["rewrites"] == [{"key": "algo.epochs", "given": 4, "used": 1, "why":
                                    "task 'tabular_single' takes 1 optimizer step(s) per batch "
                                    "for every method"}]
    assert "algo.epochs=4 runs as algo.epochs=1: task 'tabular_single'" in capsys.readouterr().out
