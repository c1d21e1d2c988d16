"""TPO (and GRPO) inside TRL's GRPOTrainer (integrations.trl_trainer) on a tiny causal LM
built in code, on the CPU, with a verifiable reward from the harness's own scorer (GSM8K's
final-number rule, tasks/_problems.score): at each of the first optimizer steps the loss
TRL returns and the gradients it accumulates equal a plain forward plus the harness's
loss on the same rows regrouped by hand (gradient accumulation 2, rows shuffled by TRL),
and on TRL's own per-token log-probs the loss is the harness's bit for bit;
the settings a group loss cannot honour are refused; the recorder writes run directories
that collect and plot read beside the harness's runs.

Needs TRL (the `trl` extra): skipped, with this reason, where it is not installed."""
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]' runs these tests")
transformers = pytest.importorskip("transformers")

from tpo_bench.algorithms.grpo import GRPO  # noqa: E402
from tpo_bench.algorithms.tpo import TPO  # noqa: E402
from tpo_bench.contract.batch import Batch, reference_kl  # noqa: E402
from tpo_bench.tasks import _problems  # noqa: E402

from tpo_bench.integrations.trl_trainer import ZooGRPOTrainer, check_args  # noqa: E402
from tpo_bench.integrations.trl_record import HarnessRecorder  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
G = 4  # completions per prompt
CHARS = list("0123456789+= ")


def tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    fast.padding_side = "left"
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                   max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
                                   bos_token_id=1, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(cfg), fast


PROBLEMS = [(f"{a}+{b}=", str(a + b)) for a in range(5) for b in range(5)]


def dataset():
    from datasets import Dataset
    return Dataset.from_dict({"prompt": [p for p, _ in PROBLEMS], "answer": [a for _, a in PROBLEMS]})


def harness_reward(completions, answer, **_):
    """GSM8K's rule from the harness: 1 when the completion's final number is the answer."""
    return [_problems.score(_problems.GSM8K, c, _problems.Problem("", a, {"answer": a}))
            for c, a in zip(completions, answer)]


def config(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=2 * G, num_generations=G,
                steps_per_generation=1, gradient_accumulation_steps=2, max_completion_length=3,
                max_steps=2, learning_rate=0.05, logging_steps=1, report_to="none", save_strategy="no",
                use_cpu=True, seed=0, max_grad_norm=0.0, temperature=1.0, beta=0.0,
                dataloader_num_workers=0, disable_tqdm=True, bf16=False)
    base.update(kw)
    return trl.GRPOConfig(**base)


class Recording(ZooGRPOTrainer):
    """Keeps each loss call's rows and returned loss; at each optimizer step, before the
    update, the reference (a plain forward and the harness's loss) and TRL's gradient."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls, self.checks = [], []
        self.add_callback(_Check(self))

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.calls.append(({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()},
                           loss.detach().clone()))
        return loss


class _Check(transformers.TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kw):
        t = self.trainer
        model = t.model
        params = [p for p in model.parameters() if p.requires_grad]
        calls, t.calls = t.calls, []
        ref_total, rows = 0.0, []
        for inputs, _ in calls:
            ref_total = ref_total + plain_loss(model, inputs, t.algorithm, t.beta) / len(calls)
            rows.append(inputs)
        grads = torch.autograd.grad(ref_total, params)
        with torch.no_grad():  # TRL's own log-probs, sorted by hand: the loss bit for bit
            exact = [plain_loss(model, i, t.algorithm, t.beta, logp=trl_logp(t, model, i)) / len(calls)
                     for i in rows]
        t.checks.append({"trl_loss": [float(l) for _, l in calls],
                         "bitwise": [bool(e == l) for e, (_, l) in zip(exact, calls)],
                         "ref_loss": [float(plain_loss(model, i, t.algorithm, t.beta).detach()) / len(calls)
                                      for i in rows],
                         "grad_err": max(float((p.grad - g).abs().max()) for p, g in zip(params, grads)),
                         "grad_norm": math.sqrt(sum(float(g.pow(2).sum()) for g in grads)),
                         "rows": rows})


def trl_logp(trainer, model, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    return trainer._get_per_token_logps_and_entropies(model, ids, att, inputs["completion_ids"].shape[1])[0]


def plain_loss(model, inputs, algo, beta, logp=None):
    """A forward of the model (or the given per-token log-probs) and the harness's loss on
    the rows sorted by hand."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    T = inputs["completion_ids"].shape[1]
    if logp is None:
        logits = model(input_ids=ids, attention_mask=att).logits[:, -T - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    order = sorted(range(len(ids)), key=lambda i: (int(inputs["zoo_group"][i]), int(inputs["zoo_slot"][i])))
    order = torch.tensor(order)
    m = inputs["completion_mask"][order].bool()
    n = len(order) // G
    view = lambda x: x[order].masked_fill(~m, 0).view(n, G, T)  # noqa: E731
    s = inputs["zoo_scores"][order].view(n, G)
    ref = inputs.get("ref_per_token_logps")
    old = inputs.get("old_per_token_logps")  # TRL keeps them when a batch is reused (num_iterations > 1)
    batch = Batch.sampled_group(view(logp).detach() if old is None else view(old), s.unsqueeze(-1) * m.view(n, G, T), s >= 1, scores=s,
                                mask=m.view(n, G, T), logp_ref=None if ref is None else view(ref))
    loss = algo.loss(batch, view(logp)).loss
    return loss + beta * reference_kl(batch, view(logp)) if beta else loss


def train(tmp_path, algorithm, recorder=None, **kw):
    model, tok = tiny_model_and_tokenizer()
    path = tmp_path / "tiny-llama"  # from disk: TRL loads the reference model (beta > 0) by path
    model.save_pretrained(path)
    tok.save_pretrained(path)
    trainer = Recording(model=str(path), reward_funcs=harness_reward, args=config(tmp_path, **kw),
                        train_dataset=dataset(), processing_class=tok, algorithm=algorithm,
                        callbacks=[recorder] if recorder else None)
    trainer.train()
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,beta,kw", [
    (TPO(), 0.0, {}), (TPO(), 0.1, {}), (GRPO(kl_coef=0.0), 0.0, {}),
    # the second step reuses the first step's batch after an update: q stays the target of
    # the old log-probs TRL kept (TPO's epochs)
    (TPO(), 0.0, dict(gradient_accumulation_steps=1, num_iterations=2))])
def test_trl_steps_equal_a_plain_forward_and_the_harness_loss(tmp_path, algorithm, beta, kw):
    t = train(tmp_path, algorithm, beta=beta, **kw)
    assert len(t.checks) == 2  # two optimizer steps
    informative = 0
    for c in t.checks:
        assert len(c["trl_loss"]) == kw.get("gradient_accumulation_steps", 2)
        for got, want in zip(c["trl_loss"], c["ref_loss"]):
            assert abs(got - want) <= 1e-6, (got, want)  # TRL's loss / gradient accumulation steps
        assert c["grad_err"] <= 1e-6, c["grad_err"]
        assert all(c["bitwise"]), c  # on TRL's own log-probs: the harness's loss, bit for bit
    if kw.get("num_iterations"):
        first, second = t.checks[0]["rows"][0], t.checks[1]["rows"][0]
        assert torch.equal(first["completion_ids"], second["completion_ids"])  # the batch reused
        assert "old_per_token_logps" in second
    for c in t.checks:
        for rows in c["rows"]:
            key = (rows["zoo_group"] * G + rows["zoo_slot"]).tolist()
            assert key != sorted(key)  # TRL shuffled the rows: the loss regrouped them
            informative += sum(int(rows["zoo_scores"][rows["zoo_group"] == g].std() > 0)
                               for g in rows["zoo_group"].unique())
    assert informative > 0  # some group had unequal scores: a gradient to compare
    assert any(c["grad_norm"] > 1e-4 for c in t.checks)


@pytest.mark.parametrize("setting,message", [
    (dict(steps_per_generation=2), "shuffles a generation batch's rows"),
    (dict(off_policy_mask_threshold=0.5), "off_policy_mask_threshold"),
    (dict(top_entropy_quantile=0.5), "top_entropy_quantile"),
    (dict(mask_truncated_completions=True), "mask_truncated_completions"),
    (dict(multi_objective_aggregation="normalize_then_sum"), "raw weighted sum"),
])
def test_settings_a_group_loss_cannot_honour_are_refused(tmp_path, setting, message):
    kw = dict(output_dir=str(tmp_path), num_generations=G, per_device_train_batch_size=2 * G,
              steps_per_generation=1, report_to="none", use_cpu=True)
    kw.update(setting)
    with pytest.raises(ValueError, match=message):
        check_args(trl.GRPOConfig(**kw))


def test_a_micro_batch_of_part_groups_is_refused(tmp_path):
    """On one process TRL's own check (generation batch a multiple of num_generations)
    already implies it; on several, a process's share of the generation batch is its
    micro-batch (2 processes x 2 rows, groups of 4: TRL accepts, the group loss cannot)."""
    args = trl.GRPOConfig(output_dir=str(tmp_path), num_generations=G, per_device_train_batch_size=2 * G,
                          steps_per_generation=1, report_to="none", use_cpu=True)
    check_args(args)
    args.per_device_train_batch_size = G // 2
    with pytest.raises(ValueError, match="not a multiple of num_generations=4: a micro-batch must hold whole groups"):
        check_args(args)


def test_vllm_importance_sampling_is_refused(tmp_path):
    args = trl.GRPOConfig(output_dir=str(tmp_path), num_generations=G, per_device_train_batch_size=2 * G,
                          steps_per_generation=1, report_to="none", use_cpu=True)
    args.use_vllm, args.vllm_importance_sampling_correction = True, True  # no vLLM here to start
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction"):
        check_args(args)
    args.vllm_importance_sampling_correction = False
    check_args(args)


def test_a_single_sample_algorithm_is_refused_before_the_model_loads(tmp_path):
    from tpo_bench.algorithms.pg import PG
    with pytest.raises(ValueError, match="consumes 'sample'"):
        ZooGRPOTrainer(model=None, reward_funcs=harness_reward, args=config(tmp_path), algorithm=PG())


@pytest.mark.slow
def test_recorded_trl_runs_are_collected_and_plotted_beside_harness_runs(tmp_path, monkeypatch):
    from tpo_bench.analysis import collect, plot
    root = tmp_path / "outputs"
    shutil.copytree(FIXTURES / "legacy_runs", root)  # the harness's own runs
    for name, algo in (("tpo", TPO()), ("grpo", GRPO(kl_coef=0.0))):
        rec = HarnessRecorder(root, "trl_sums", name, "tiny-llama-2x16", algorithm=algo,
                              task={"dataset": "sums_0_4"})
        train(tmp_path / name, algo, recorder=rec, max_steps=3)
        assert rec.path is not None and rec.path.parent.parent.parent.name == "trl_sums"
    df, skipped = collect.collect(root)
    assert not [s for s in skipped if "trl_sums" in str(s.path)], skipped
    trl_rows = df[df["task.name"] == "trl_sums"]
    assert sorted(trl_rows["algo.name"].unique()) == ["grpo", "tpo"]
    assert sorted(trl_rows["step"].unique()) == [0, 1, 2]
    assert trl_rows["loss"].notna().all() and trl_rows["reward_mean"].between(0, 1).all()
    assert (trl_rows["error"] == 1 - trl_rows["reward_mean"]).all()
    assert trl_rows[trl_rows["algo.name"] == "tpo"]["q_success"].notna().any() or \
        (trl_rows["reward_mean"] == 0).all()
    assert len(df["task.name"].unique()) > 1  # the harness's runs in the same table
    summary = json.loads(next((root / "trl_sums" / "tpo").rglob("summary.json")).read_text())
    assert summary["status"] == "completed" and summary["rows"] == 3
    figs = []
    monkeypatch.setattr(plot.plt, "close", figs.append)
    paths = plot.plot_results(df, tmp_path / "plots")
    assert (tmp_path / "plots" / "trl_sums.png") in paths and len(paths) > 2
    ax = next(f.axes[0] for f in figs if f.get_suptitle().startswith("trl_sums"))
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("TPO") for t in texts) and any(t.startswith("GRPO") for t in texts), texts


def test_the_recorder_refuses_a_row_less_than_every_step(tmp_path):
    rec = HarnessRecorder(tmp_path, "t", "tpo", "m", algorithm=TPO())
    with pytest.raises(ValueError, match="logging_steps=1"):
        rec.on_train_begin(config(tmp_path, logging_steps=2), None, None)
