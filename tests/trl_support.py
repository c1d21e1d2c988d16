"""TRL-side helpers for tests/test_trl.py: a tiny causal LM built in code, a verifiable
reward from the harness's scorer, and a trainer that records, at each optimizer step, a plain
forward plus the harness's loss beside TRL's. Imported by that file's fixture only, so
collecting the suite does not import TRL and transformers."""
import math

import torch
import transformers
import trl

from tpo_bench.contract.batch import Batch, reference_kl
from tpo_bench.tasks import _problems

from tpo_bench.integrations.trl_trainer import ZooGRPOTrainer, check_args  # noqa: F401
from tpo_bench.integrations.trl_record import HarnessRecorder  # noqa: F401

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


def digit_share(completions, **_):
    """A graded reward (the share of a completion's characters that are digits): unequal
    scores inside most groups, so a group loss has a gradient from the first step."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def gradient_cosines(trainer, inputs, loss_types) -> dict[str, float]:
    """The cosine between the gradient of the harness's loss on these rows (a plain forward,
    the trainer's algorithm) and that of TRL's own loss with each loss_type, at the model's
    current parameters, on the same rows and TRL's advantages."""
    model = trainer.model
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]

    def flat(loss):
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double()

    zoo = flat(plain_loss(model, inputs, trainer.algorithm, 0.0))
    kept, out = trainer.loss_type, {}
    try:
        for loss_type in loss_types:
            trainer.loss_type = loss_type
            theirs = flat(trl.GRPOTrainer._compute_loss(trainer, model, inputs))
            out[loss_type] = float(zoo @ theirs / (zoo.norm() * theirs.norm()))
    finally:
        trainer.loss_type = kept
    return out


def train(tmp_path, algorithm, recorder=None, reward=harness_reward, **kw):
    model, tok = tiny_model_and_tokenizer()
    path = tmp_path / "tiny-llama"  # from disk: TRL loads the reference model (beta > 0) by path
    model.save_pretrained(path)
    tok.save_pretrained(path)
    trainer = Recording(model=str(path), reward_funcs=reward, args=config(tmp_path, **kw),
                        train_dataset=dataset(), processing_class=tok, algorithm=algorithm,
                        callbacks=[recorder] if recorder else None)
    trainer.train()
    return trainer


