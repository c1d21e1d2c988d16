"""Numerical cross-check of tpo-bench's transformer stack against the paper's JAX artifact
(github.com/JeanKaddour/tpo, imported from a path you give, never copied here). With the
same initial weights it checks, on the dense-task transformer: the forward pass; the
optimizer (optax.contrib.muon against bench.optim's Muon/NAdam) over 8 steps; TPO_token's
loss and gradient (the artifact's `tpo_target`); GRPO_token's and PPO's losses and
gradients at moved weights, so that ratios and clipping are exercised; and the
terminal-reward tables' sequence-level TPO, GRPO and GRPO-no-KL on groups of K = 8
answers, and DG on single samples. Needs jax, flax and optax (0.2.8); not run by CI:

    python -m dev.crosscheck_artifact --artifact-src /path/to/tpo/src

Exits non-zero if any check is outside its tolerance.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np
import torch

H, V = 10, 2


def load(model, P) -> None:
    """Copy flax parameters into our Transformer (both keep the (in, out) layout)."""
    t = lambda a: torch.tensor(np.asarray(a))  # noqa: E731
    with torch.no_grad():
        model.tok_emb.copy_(t(P["Embed_0"]["embedding"]))
        model.pos_emb.copy_(t(P["pos_emb"]))
        for i, blk in enumerate(model.blocks):
            att, d1, d2 = P[f"SelfAttention_{i}"], P[f"Dense_{2 * i}"], P[f"Dense_{2 * i + 1}"]
            for ln, j in (("ln1", 2 * i), ("ln2", 2 * i + 1)):
                getattr(blk, f"{ln}_scale").copy_(t(P[f"LayerNorm_{j}"]["scale"]))
                getattr(blk, f"{ln}_bias").copy_(t(P[f"LayerNorm_{j}"]["bias"]))
            for ours, theirs in (("q", "query"), ("k", "key"), ("v", "value"), ("o", "out")):
                getattr(blk, f"w{ours}").copy_(t(att[theirs]["kernel"]))
                getattr(blk, f"b{ours}").copy_(t(att[theirs]["bias"]))
            blk.w1.copy_(t(d1["kernel"])); blk.b1.copy_(t(d1["bias"]))
            blk.w2.copy_(t(d2["kernel"])); blk.b2.copy_(t(d2["bias"]))
        model.lnf_scale.copy_(t(P["LayerNorm_4"]["scale"]))
        model.lnf_bias.copy_(t(P["LayerNorm_4"]["bias"]))
        model.head_w.copy_(t(P["Dense_4"]["kernel"]))
        model.head_b.copy_(t(P["Dense_4"]["bias"]))


def param_gap(model, ref) -> tuple[float, str]:
    # The key biases shift every score of a query equally, so softmax ignores them: their
    # gradient is float noise, which Muon normalises to a full-size step in both codes.
    gaps = {n: (a - b).abs().max().item() for (n, a), (_, b)
            in zip(model.named_parameters(), ref.named_parameters()) if not n.endswith(".bk")}
    worst = max(gaps, key=gaps.get)
    return gaps[worst], worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact-src", required=True, help="the artifact's src/ folder")
    args = ap.parse_args()
    sys.path.insert(0, args.artifact_src)
    import jax
    import jax.numpy as jnp
    import optax
    from optax.contrib import muon
    from tpo.algorithms import dg_loss, grpo_loss, ppo_loss, tpo_target
    from tpo.models import CausalTransformer

    from tpo_bench.algorithms.dg import DG
    from tpo_bench.algorithms.grpo import GRPO
    from tpo_bench.algorithms.ppo import PPO
    from tpo_bench.algorithms.tpo import TPO
    from tpo_bench.contract.batch import Request
    from tpo_bench.bench.optim import build_optimizer
    from tpo_bench.contract.rng import Streams
    from tpo_bench.tasks.seq import SeqTask
    from tpo_bench.tasks.transformer import Transformer

    fm = CausalTransformer(vocab_size=V, max_seq_len=2 * H, d_model=64, num_heads=2,
                           num_layers=2, ffn_mult=4)
    params = fm.init(jax.random.PRNGKey(0), jnp.zeros((1, 2 * H), jnp.int32))
    ours = Transformer(V, 2 * H)
    load(ours, params["params"])
    rng = np.random.default_rng(0)
    toks = rng.integers(0, V, (100, 2 * H))
    results = []

    fwd = np.abs(np.asarray(fm.apply(params, jnp.asarray(toks)))
                 - torch.log_softmax(ours(torch.tensor(toks)), -1).detach().numpy()).max()
    results.append(("forward log-probs, max |diff|", fwd, 1e-5))

    tgt = rng.integers(0, V, (100, 2 * H))
    jloss = lambda p: -jnp.take_along_axis(  # noqa: E731
        fm.apply(p, jnp.asarray(toks)), jnp.asarray(tgt)[..., None], -1).mean()
    opt, p = muon(learning_rate=1e-3), params
    state = opt.init(p)
    topt = build_optimizer("muon_nadam", ours.parameters(), lr=1e-3)
    for _ in range(8):
        up, state = opt.update(jax.grad(jloss)(p), state, p)
        p = optax.apply_updates(p, up)
        topt.zero_grad()
        lp = torch.log_softmax(ours(torch.tensor(toks)), -1)
        (-lp.gather(-1, torch.tensor(tgt)[..., None]).mean()).backward()
        topt.step()
    ref = Transformer(V, 2 * H)
    load(ref, p["params"])
    gap, where = param_gap(ours, ref)
    results.append((f"8 optimizer steps, max param |diff| ({where})", gap, 1e-5))

    load(ours, params["params"])
    task = SeqTask(reward="sequential", target="reverse_copy", episodes=1)
    batch = task.rollout(ours, Request(name="tpo_token", k=8, level="token",
                                       needs="action_group"), Streams.from_seed(0)).batch
    out = TPO(level="token").loss(batch, task.logprobs(ours, batch))
    obs = batch.obs  # tasks.seq.TokenObs
    prompts, beh, cands = obs.prompts.numpy(), obs.behaviour.numpy(), obs.candidates.numpy()
    B, _, K = cands.shape
    states = np.zeros((B, H, 2 * H), np.int64)  # prefix state t: prompt + behaviour[:t]
    for t in range(H):
        states[:, t, :H], states[:, t, H:H + t] = prompts, beh[:, :t]
    step = np.tile(np.arange(H), B)
    old = jnp.asarray(batch.logp_old.numpy().reshape(B * H, K))
    sc = jnp.asarray(batch.scores.numpy())
    q = tpo_target(old, sc, eta=1.0)

    def candidate_logp(p_):  # log pi(candidate | prefix state), [B*H, K]
        lp = fm.apply(p_, jnp.asarray(states.reshape(B * H, 2 * H)))[jnp.arange(B * H), H + step - 1]
        return lp[jnp.arange(B * H)[:, None], jnp.asarray(cands.reshape(B * H, K))]

    def jtpo(p_):  # science §Update rules TPO_token: -sum_i q_i log_softmax(logp_theta)_i, mean over states
        return -(q * jax.nn.log_softmax(candidate_logp(p_), -1)).sum(-1).mean()

    def answer_logp(p_, seqs):  # [rows, H] log-probs of the answer half of prompt + answer rows
        lp = fm.apply(p_, seqs)[:, H - 1:2 * H - 1]
        return jnp.take_along_axis(lp, seqs[:, H:, None], -1)[..., 0]

    def group_adv(s_):  # science §Update rules GRPO: (s - mean) / (std + 1e-8) over each group
        return (s_ - s_.mean(-1, keepdims=True)) / (s_.std(-1, keepdims=True) + 1e-8)

    def compare(name, loss, jfn, at) -> None:
        ours.zero_grad()
        loss.backward()
        jl, g = jax.value_and_grad(jfn)(at)
        # Relative past 1: sequence-level KL terms at moved weights reach tens.
        results.append((f"{name} loss, |diff| / max(1, |loss|)",
                        abs(loss.item() - float(jl)) / max(1.0, abs(float(jl))), 1e-5))
        gref = Transformer(V, 2 * H)
        load(gref, g["params"])
        rel = max((a.grad - r).norm().item() / (r.norm().item() + 1e-30)
                  for (n, a), (_, r) in zip(ours.named_parameters(), gref.named_parameters())
                  if not n.endswith(".bk") and r.norm() > 0)
        results.append((f"{name} gradient, max relative |diff| per tensor", rel, 1e-4))

    compare("TPO_token (sequential batch)", out.loss, jtpo, params)

    # The clipped losses at the weights after the 8 optimizer steps above (p): r != 1.
    adv = group_adv(sc)
    load(ours, p["params"])

    def jgrpo(p_):  # science §Update rules GRPO_token: clipped surrogate - beta KL, summed over K, mean over states
        return grpo_loss(candidate_logp(p_), old, adv, epsilon=0.2, beta=0.04)

    compare("GRPO_token (sequential batch, moved weights)",
            GRPO(level="token").loss(batch, task.logprobs(ours, batch)).loss, jgrpo, p)

    load(ours, params["params"])
    sb = task.rollout(ours, Request(name="ppo", k=1), Streams.from_seed(1)).batch
    samples = jnp.asarray(np.concatenate([sb.obs.prompts.numpy(),  # tasks.seq.SeqObs
                                          sb.obs.answers.numpy().reshape(-1, H)], 1))
    sample_adv = jnp.asarray(sb.advantages.numpy().reshape(-1, H))
    load(ours, p["params"])

    def jppo(p_):  # science §Update rules PPO: per-token ratio, no clamp, sum over tokens, mean over samples
        return ppo_loss(answer_logp(p_, samples), jnp.asarray(sb.logp_old.numpy().reshape(-1, H)),
                        sample_adv, epsilon=0.2)

    compare("PPO (sequential batch, moved weights)",
            PPO().loss(sb, task.logprobs(ours, sb)).loss, jppo, p)

    # Sequence level, at the moved weights. Terminal reward at init is almost never 1
    # (2^-10 per answer), so the groups are scored by their bag-of-tokens mean (graded)
    # and by that mean >= 0.7 (binary and mostly 0 like terminal scores, with constant
    # groups, where the std floor decides; the script prints how many).
    load(ours, params["params"])
    gb = SeqTask(reward="bag_of_tokens", target="reverse_copy", episodes=1).rollout(
        ours, Request(name="tpo", k=8, needs="action_group"), Streams.from_seed(2)).batch
    load(ours, p["params"])
    prompts, answers = gb.obs.prompts.numpy(), gb.obs.answers.numpy()  # tasks.seq.SeqObs
    B, K, _ = answers.shape
    full = jnp.asarray(np.concatenate([np.repeat(prompts, K, 0), answers.reshape(B * K, H)], 1))
    old_seq = jnp.asarray(gb.seq_logp_old().numpy())

    def seq_logp(p_):  # [B, K] answer log-probs, summed over tokens
        return answer_logp(p_, full).reshape(B, K, H).sum(-1)

    graded = gb.scores
    for label, scores in (("graded", graded), ("binary", (graded >= 0.7).float())):
        b = dataclasses.replace(gb, scores=scores)
        if label == "binary":
            print(f"binary scores: {int((scores.std(-1) == 0).sum())} of {B} groups constant")
        s_ = jnp.asarray(scores.numpy())
        q_seq = tpo_target(old_seq, s_, eta=1.0)
        compare(f"TPO ({label} scores, moved weights)", TPO().loss(b, task.logprobs(ours, b)).loss,
                lambda p_: -(q_seq * jax.nn.log_softmax(seq_logp(p_), -1)).sum(-1).mean(), p)
        a_seq = group_adv(s_)
        for beta in (0.04, 0.0):
            compare(f"GRPO kl_coef={beta} ({label} scores, moved weights)",
                    GRPO(kl_coef=beta).loss(b, task.logprobs(ours, b)).loss,
                    lambda p_: grpo_loss(seq_logp(p_), old_seq, a_seq, epsilon=0.2, beta=beta), p)

    def jdg(p_):  # science §Update rules DG: sigmoid(A * surprisal / eta) gates each REINFORCE term
        return dg_loss(answer_logp(p_, samples), sample_adv, eta=1.0)

    # DG's one on-policy epoch: at the weights that drew the samples (surprisal = -logp_old).
    load(ours, params["params"])
    compare("DG (sequential batch)", DG().loss(sb, task.logprobs(ours, sb)).loss, jdg, params)

    ok = True
    for name, value, tol in results:
        ok &= value <= tol
        print(f"{'ok  ' if value <= tol else 'FAIL'} {name}: {value:.2e} (tolerance {tol:.0e})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
