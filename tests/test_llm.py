"""The LLM task family (tasks/llm.py) on a ~20k-parameter Qwen3-architecture
model built from conf/task/arch/micro_qwen3.yaml: sampling and re-scoring agree, the
completion mask says where each completion ends, gradient accumulation never splits a
group and sums to the whole batch's gradient, held-out pass@k, the refusals before any
work, and the whole path from the command line (the CI smoke)."""
import dataclasses
import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

from tpo_bench.bench.build import ConfigError, build  # noqa: E402
from tpo_bench.bench.engine import backward  # noqa: E402
from tpo_bench.contract.batch import reference_kl  # noqa: E402
from conftest import REPO, compose, run_bench, train_here  # noqa: E402
from tpo_bench.contract.rng import Streams  # noqa: E402
from tpo_bench.tasks import _lm  # noqa: E402

SMALL = ["task=llm_chain_sum", "task/arch=micro_qwen3", "task.train_size=64", "task.test_size=8",
         "task.warm_start_steps=20", "task.warm_start_lr=1e-2", "task.warm_start_batch=16",
         "task.prompts_per_step=3", "task.eval_k=2", "task.episodes=2", "task.eval_every=1",
         "threads=1"]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("llm-base"))


def spec_of(base_dir, *extra):
    return build(compose(*SMALL, f"task.base_dir={base_dir}", *extra))


@pytest.fixture(scope="module")
def rolled(base_dir):
    torch.set_num_threads(1)
    spec = spec_of(base_dir, "algo=tpo", "algo.k=4")
    streams = Streams.from_seed(0)
    policy = spec.task.make_policy(streams.init)
    return spec, policy, spec.task.rollout(policy, spec.request, streams)


def test_lora_adapters_start_from_the_seeds_own_draw(base_dir):
    """LoRA's random init comes from the seed's init stream, whatever torch's global
    generator holds (peft draws from it): one seed, one set of adapters; another seed,
    another set."""
    spec = spec_of(base_dir, "algo=tpo", "algo.k=4", "task.lora_rank=2")

    def adapters(seed: int, global_seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(global_seed)
        policy = spec.task.make_policy(Streams.from_seed(seed).init)
        return {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_A" in n}

    a, again, other = adapters(0, 1), adapters(0, 2), adapters(1, 1)
    assert a and all(torch.equal(a[n], again[n]) for n in a)
    assert all(not torch.equal(a[n], other[n]) for n in a)


def test_rescoring_gives_the_sampling_log_probs(rolled):
    """The training forward (prompt and completion at once) scores each sampled token as
    the sampler's cached forward did: the ratio starts at 1. An off-by-one between the
    two (a position id, the logit that predicts a token) breaks it."""
    spec, policy, ro = rolled
    logp = spec.task.logprobs(policy, ro.batch)
    assert logp.shape == ro.batch.logp_old.shape == (3, 4, spec.task.max_new_tokens)
    assert torch.allclose(logp, ro.batch.logp_old, atol=1e-5)
    assert (ro.batch.logp_old[~ro.batch.mask] == 0).all() and (logp[~ro.batch.mask] == 0).all()
    assert (ro.batch.logp_old[ro.batch.mask] < 0).all()


def test_the_mask_ends_each_completion_at_its_eos(rolled):
    spec, policy, ro = rolled
    tok = policy.tokenizer
    tokens, mask = ro.batch.obs.tokens.reshape(-1, spec.task.max_new_tokens), ro.batch.mask.reshape(
        -1, spec.task.max_new_tokens)
    ended = 0
    for row, m in zip(tokens.tolist(), mask.tolist()):
        n = sum(m)
        assert m == [True] * n + [False] * (len(m) - n)  # a prefix
        if tok.eos_token_id in row[:n]:
            ended += 1
            assert row.index(tok.eos_token_id) == n - 1  # the EOS is the last real token
            assert all(t == tok.pad_token_id for t in row[n:])
        else:
            assert n == len(m)  # no EOS: the whole budget
    assert ended > 0  # the warm start taught the model to stop
    assert ro.tokens == int(mask.sum())
    assert ro.metrics["response_length"] == pytest.approx(mask.sum(-1).float().mean().item())


def test_scores_are_the_verifiers(rolled):
    from tpo_bench.tasks import _problems
    spec, policy, ro = rolled
    texts = [policy.tokenizer.decode(r[m].tolist(), skip_special_tokens=True)
             for r, m in zip(ro.batch.obs.tokens.reshape(12, -1), ro.batch.mask.reshape(12, -1))]
    prompts = policy.tokenizer.batch_decode(ro.batch.obs.prompt_ids, skip_special_tokens=True)
    train = {p.prompt: p for p in spec.task.problems("train")}
    want = [_problems.score(spec.task.dataset, t, train[prompts[i // 4]]) for i, t in enumerate(texts)]
    assert ro.batch.scores.reshape(-1).tolist() == pytest.approx(want)
    assert torch.equal(ro.batch.success, ro.batch.scores >= 1)


def test_accumulated_gradient_is_the_whole_batch_gradient(rolled, base_dir):
    """micro_batch = one group (4 completions) per backward: the summed gradient equals
    the one-pass gradient (TPO's loss is a mean over groups)."""
    spec, policy, ro = rolled
    # Scores that vary in every group (the micro model rarely succeeds, and a group of
    # equal scores puts no gradient on TPO's loss).
    scores = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0], [0.0, 0, 0, 1]])
    batch = dataclasses.replace(ro.batch, scores=scores, success=scores >= 1)
    grads = {}
    for micro in (0, 4):
        task = spec_of(base_dir, "algo=tpo", "algo.k=4", f"task.micro_batch={micro}").task
        policy.zero_grad(set_to_none=True)
        loss, _ = backward(task, spec.algo, [policy], [batch], 0.0)
        grads[micro] = (loss, torch.cat([p.grad.reshape(-1) for p in policy.parameters()]))
    assert float(grads[0][0]) == pytest.approx(float(grads[4][0]), rel=1e-5)  # 0-d tensors: floats
    assert grads[0][1].norm() > 1e-2
    assert torch.allclose(grads[0][1], grads[4][1], atol=1e-7, rtol=1e-4)


def test_reference_penalty_is_added_to_the_algorithms_loss(rolled, base_dir):
    spec, policy, ro = rolled
    with torch.no_grad():  # move the policy away from its reference
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    try:
        plain, _ = backward(spec.task, spec.algo, [policy], [ro.batch], 0.0)
        penalised, _ = backward(spec.task, spec.algo, [policy], [ro.batch], 0.5)
        kl = reference_kl(ro.batch, spec.task.logprobs(policy, ro.batch)).item()
        assert kl > 0
        assert float(penalised - plain) == pytest.approx(0.5 * kl, rel=1e-4)
    finally:
        with torch.no_grad():
            policy.model.load_state_dict(spec.task.make_policy(None).model.state_dict())


def test_evaluation_is_pass_at_1_and_pass_at_k_of_the_same_draws(rolled, monkeypatch):
    spec, policy, _ = rolled
    task = spec.task
    first, again = task.evaluate(policy), task.evaluate(policy)
    assert first == again  # its own generator, fresh each time: the same draws
    # The formulas on known outcomes: 3 prompts x 2 samples, solved (1,0), (0,0), (1,1).
    fake = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    monkeypatch.setattr(type(task), "problems", lambda self, split: [None] * 3)
    monkeypatch.setattr(type(task), "_complete", lambda self, pol, probs, k, gen, dev: {"scores": fake[:len(probs)]})
    out = task.evaluate(policy)
    assert out["pass_at_1"] == pytest.approx(0.5)
    assert out["pass_at_k"] == pytest.approx(2 / 3)
    assert out["test_error"] == pytest.approx(0.5)


def test_gradient_checkpointing_recomputes_each_layer(rolled, base_dir):
    """transformers recomputes a layer only in training mode, and a loaded model is in
    eval mode: with task.gradient_checkpointing each layer's MLP runs twice in a training
    forward and backward (once without), and the scores are still the sampler's (dropout
    stays off)."""
    spec, _, ro = rolled
    for on, runs in ((False, 1), (True, 2)):
        task = spec_of(base_dir, "algo=tpo", "algo.k=4", f"task.gradient_checkpointing={str(on).lower()}").task
        policy = task.make_policy(None)
        mlps = [m for m in policy.model.modules() if type(m).__name__.endswith("MLP")]
        calls = []
        for m in mlps:  # the recomputation calls forward without the module's hooks
            m.forward = (lambda f: lambda *a, **kw: calls.append(1) or f(*a, **kw))(m.forward)
        logp = task.logprobs(policy, ro.batch)
        logp.sum().backward()
        assert mlps and len(calls) == runs * len(mlps), on
        assert torch.allclose(logp, ro.batch.logp_old, atol=1e-5)


def test_sampling_is_the_same_with_gradient_checkpointing(rolled, base_dir):
    """Checkpointed layers are flagged as training (checkpoint_in_eval_mode) yet sample
    under no_grad: the rollout, its tokens and behaviour log-probs, must be the one the
    same streams draw without checkpointing (a layer that recomputed, dropped out or
    skipped its KV cache while sampling would change them)."""
    spec, _, ro = rolled
    task = spec_of(base_dir, "algo=tpo", "algo.k=4", "task.gradient_checkpointing=true").task
    streams = Streams.from_seed(0)
    policy = task.make_policy(streams.init)
    assert any(getattr(m, "gradient_checkpointing", False) for m in policy.model.modules())
    again = task.rollout(policy, spec.request, streams)
    assert torch.equal(again.batch.obs.tokens, ro.batch.obs.tokens)
    assert torch.equal(again.batch.logp_old, ro.batch.logp_old)


def test_the_frozen_reference_moves_with_the_policy(rolled):
    """Full fine-tuning's reference is a plain attribute (not in state_dict): .to() must
    still take it along, or on a GPU it stays behind on the CPU."""
    spec, _, _ = rolled
    policy = spec.task.make_policy(None).to(torch.float64)
    with policy.reference() as ref:
        assert ref is not policy.model
        assert {p.dtype for p in ref.parameters()} == {torch.float64}


def test_the_reference_pass_in_chunks_is_the_whole_pass(rolled):
    spec, policy, ro = rolled
    obs, (N, K, T) = ro.batch.obs, ro.batch.obs.tokens.shape
    args = (policy.model, obs.prompt_ids.repeat_interleave(K, 0), obs.prompt_mask.repeat_interleave(K, 0),
            obs.tokens.view(N * K, T), ro.batch.mask.view(N * K, T), 1.0)
    whole = _lm.completion_logp_chunked(*args, 0)
    assert torch.allclose(whole.view(N, K, T), ro.batch.logp_old, atol=1e-5)
    assert torch.allclose(_lm.completion_logp_chunked(*args, 5), whole, atol=1e-6)  # 5, 5 and 2 rows


def test_the_paper_scale_presets_hold_spec_7s_settings():
    for preset, lora, kl, dtype, every in (("llm_gsm8k", 32, 1e-3, "bfloat16", 5),
                                           ("llm_graph_color", 0, 0.0, "mixed_bfloat16", 25)):
        cfg = compose(f"task={preset}")
        t = cfg["task"]
        assert cfg["optim"] == {"name": "adamw", "lr": 1e-5, "weight_decay": 0.0}, preset
        assert (t["prompts_per_step"], t["lora_rank"], t["kl_ref"], t["dtype"], t["eval_every"],
                t["gradient_checkpointing"], t["temperature"], t["from_arch"]) == (
                    16, lora, kl, dtype, every, True, 1.0, "refuse"), preset
        assert t["arch"]["num_hidden_layers"] == 28 and t["micro_batch"] == 16
        sweep = OmegaConf.load(REPO / "conf" / "experiment" / f"{preset}.yaml")["hydra"]["sweeper"]["params"]
        assert (sweep["algo"], sweep["algo.k"], sweep["task"]) == ("tpo,grpo", 16, preset)


# ------------------------------------------------------------------ refusals before work

def refused(base_dir, *extra) -> str:
    with pytest.raises(ConfigError) as e:
        spec_of(base_dir, *extra)
    return str(e.value)


def test_a_bad_model_path_is_refused(base_dir, tmp_path):
    assert "task.model_path" in refused(base_dir, f"task.model_path={tmp_path / 'nowhere'}")


def test_a_tokenizer_the_model_cannot_embed_is_refused(base_dir, tmp_path):
    """A model directory whose vocab_size (50) is below its tokenizer's 99 tokens."""
    model = _lm.from_arch({**compose(*SMALL)["task"]["arch"], "vocab_size": 50}, torch.float32, 0)
    model.save_pretrained(tmp_path / "m")
    _lm.char_tokenizer().save_pretrained(tmp_path / "m")
    msg = refused(base_dir, f"task.model_path={tmp_path / 'm'}", "task.warm_start_steps=0")
    assert "task.model_path" in msg and "vocab_size is 50" in msg
    assert "task.arch.vocab_size" in refused(base_dir, "task.arch.vocab_size=64")


def test_the_paper_scale_presets_refuse_without_weights():
    """No random 1.7B model is warm-started in their name: without task.model_path they
    are refused before any work, pointing at the probe for random weights."""
    for preset in ("llm_gsm8k", "llm_graph_color"):
        with pytest.raises(ConfigError) as e:
            build(compose(f"task={preset}", "algo=tpo"))
        assert "task.model_path" in str(e.value) and f"tools.llm_scale task={preset}" in str(e.value)


def test_random_weights_are_asked_for_explicitly_and_alone(base_dir, tmp_path):
    assert "task.from_arch=random" in refused(base_dir, "task.from_arch=random")  # SMALL warm-starts
    assert "task.from_arch=random" in refused(base_dir, "task.from_arch=random", "task.warm_start_steps=0",
                                              f"task.model_path={tmp_path}")
    msg = refused(base_dir, "task.from_arch=pretrained")
    assert "task.from_arch" in msg and "warm_start, random, refuse" in msg


def test_an_unknown_reasoning_gym_task_is_refused(base_dir):
    msg = refused(base_dir, "task.dataset=chain_summ")
    assert "task.dataset" in msg and "chain_sum" in msg


def test_a_micro_batch_that_splits_a_group_is_refused(base_dir):
    msg = refused(base_dir, "algo=grpo", "algo.k=4", "task.micro_batch=6")
    assert "task.micro_batch=6" in msg and "algo.k=4" in msg
    assert "task.micro_batch" in refused(base_dir, "algo=grpo", "algo.k=4", "task.micro_batch=8")  # 8 does not divide 12
    spec_of(base_dir, "algo=grpo", "algo.k=4", "task.micro_batch=4")  # whole groups: accepted


def test_token_level_and_supervised_methods_are_refused(base_dir):
    assert "algo.level=token" in refused(base_dir, "algo=tpo_token")
    assert "verifier, not a label" in refused(base_dir, "algo=ce")


@pytest.mark.slow
def test_the_harness_imports_without_the_llm_extra():
    """With transformers and reasoning_gym unimportable, every registry still loads and a
    token task builds; an LLM task is refused naming the extra."""
    code = (
        "import sys; sys.modules['transformers'] = None; sys.modules['reasoning_gym'] = None\n"
        "sys.path.insert(0, 'tests')\n"
        "from conftest import compose\n"
        "from tpo_bench.tasks import TASKS; from tpo_bench.algorithms import ALGORITHMS\n"
        "assert 'llm' in TASKS.names() and 'tpo' in ALGORITHMS.names()\n"
        "from tpo_bench.bench.build import build, ConfigError\n"
        "build(compose('task=demo'))\n"
        "try:\n    build(compose('task=llm_chain_sum'))\nexcept ConfigError as e:\n    print('REFUSED', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "REFUSED" in out.stdout and ".[llm]" in out.stdout


# ------------------------------------------------------------------ the whole path (CI smoke)

@pytest.mark.slow
def test_an_llm_sweep_runs_and_records_the_llm_columns(base_dir, tmp_path):
    """`python -m bench -m algo=tpo,grpo,dr_grpo task=llm_chain_sum`, micro-sized: the
    base is built once (warm start), each method takes 2 RL steps, evaluations at steps
    0, 1, 2; a rerun of one run from scratch gives the same metrics (CPU, one thread)."""
    out = tmp_path / "out"
    run_bench("-m", "algo=tpo,grpo,dr_grpo", *SMALL, f"task.base_dir={base_dir}", f"output_root={out}",
              "seed=0", "hydra/launcher=local", "hydra.launcher.n_jobs=1")
    runs = sorted(out.rglob("metrics.parquet"))
    assert len(runs) == 3
    for path in runs:
        df = pd.read_parquet(path)
        assert json.loads((path.parent / "summary.json").read_text())["status"] == "completed"
        assert df["step"].tolist() == [0, 1, 2]
        assert df["pass_at_1"].between(0, 1).all() and df["pass_at_k"].ge(df["pass_at_1"]).all()
        later = df.iloc[1:]
        assert (later["tokens"].diff().dropna() > 0).all() and (later["tokens"] > 0).all()
        for col in ("response_length", "entropy", "kl_ref", "reward_mean", "all_fail_frac"):
            assert later[col].notna().all(), col
    tpo = next(p for p in runs if "/tpo/" in str(p))
    again = tmp_path / "again"
    rerun = train_here(spec_of(base_dir, "algo=tpo", f"output_root={again}", "seed=0"))
    assert rerun["status"] == "completed"
    a = pd.read_parquet(tpo).drop(columns=["wall_s"])
    b = pd.read_parquet(next(again.rglob("metrics.parquet"))).drop(columns=["wall_s"])
    pd.testing.assert_frame_equal(a, b)
