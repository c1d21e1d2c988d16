"""RLVR on a Hugging Face causal LM: N prompts of a verifiable task per step, K sampled
completions each, scored by the task's verifier.

    policy    a local AutoModelForCausalLM (task.model_path), or one built from
              architecture facts (task.arch) and warm-started (tasks/_lm.py), cached
    prompts   reasoning-gym or GSM8K (tasks/_problems.py): a train split and a disjoint
              held-out split for pass@k
    batch     N groups of K completions with a completion mask (Batch.sampled_group;
              K = 1 methods get the advantage s_i - mean_batch s); s_i in [0, 1]
    metrics   reward mean, response length, token entropy, KL to the initial policy,
              tokens; every eval_every steps held-out pass@1 and pass@k

Sequence log-probs are sums over the completion's tokens, as in the paper; token-level
groups are refused (a next-token candidate has no verifier). The base model is the same
for every seed: a seed draws the prompts and the samples.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..contract.batch import Batch, Request, Rollout, TaskOptions, reference_kl
from ..contract.rng import Streams
from ..contract.schema import IF_SET, NOT_IDENTITY
from . import _lm, _problems, register
from ._checks import positive

# task.dtype -> (the weights' dtype, the dtype forwards autocast to; None: the weights').
# A full fine-tune keeps float32 weights: AdamW's steps at the paper's lr 1e-5 are ~1e-5
# per weight, below bfloat16's resolution (2^-8 of a weight), so pure bfloat16 weights
# barely move; mixed_bfloat16 computes in bfloat16 and updates float32 weights (as verl's
# FSDP mixed precision does). LoRA adapters are float32 anyway (peft upcasts them).
DTYPES = {"float32": (torch.float32, None), "bfloat16": (torch.bfloat16, None),
          "mixed_bfloat16": (torch.float32, torch.bfloat16)}
PROMPT_FORMATS = ("raw", "chat")
# What a model built from task.arch is (task.model_path empty):
#   warm_start  a base warm-started on the train split and cached (the CPU presets)
#   random      random weights, in memory, no warm start, never cached: a full-size
#               architecture's memory and throughput (tools.llm_scale), never its science
#   refuse      none: the paper-scale presets name a pretrained model's architecture,
#               whose weights task.model_path must give
FROM_ARCH = ("warm_start", "random", "refuse")
BASE_RECIPE_VERSION = 1  # bump when the warm start's code changes what it builds


@dataclass(frozen=True)
class LMObs:
    """The prompts (left-padded, shared by their group) and the sampled completions."""

    prompt_ids: torch.Tensor
    """[N, P] token ids"""
    prompt_mask: torch.Tensor
    """[N, P] attention mask of the prompts"""
    tokens: torch.Tensor
    """[N, K, T] completion tokens, pad after the EOS"""


@register("llm")
@dataclass(frozen=True)
class LLMTask(TaskOptions):
    name: str = "llm"
    dataset: str = "chain_sum"
    dataset_config: dict = field(default_factory=dict)
    """extra reasoning-gym keyword arguments (difficulty)"""
    train_size: int = 2000
    test_size: int = 200
    model_path: str = ""
    """a local Hugging Face model directory; empty: build from `arch` (and warm-start)"""
    tokenizer_path: str = ""
    """empty: the model directory's tokenizer (the character tokenizer for a built model)"""
    arch: dict = field(default_factory=dict)
    """architecture facts (a transformers config's fields, model_type first) for a built model"""
    prompt_format: str = "raw"
    """raw: the question as the whole prompt; chat: the tokenizer's chat template"""
    question_prefix: str = ""
    """dropped from the start of every question: a dataset's fixed instruction, which a
    tiny model need not read (refused where a question does not start with it)"""
    prompts_per_step: int = 16
    """N prompt groups per step (the paper's batch size)"""
    max_new_tokens: int = 8
    temperature: float = 1.0
    episodes: int = 100
    eval_every: int = 10
    eval_k: int = 8
    """samples per held-out prompt: pass@1 is their mean success, pass@k their best"""
    eval_seed: int = 0
    """the held-out samples' generator, fresh at every evaluation (the same draws for every
    step and method: paired comparisons)"""
    kl_ref: float = 0.0
    """coefficient of the KL penalty to the initial policy, added to every method's loss"""
    lora_rank: int = 0
    """LoRA rank on every linear layer (peft); 0: full fine-tuning"""
    micro_batch: int = 0
    """completions per backward pass (gradient accumulation); a multiple of algo.k dividing
    N * K, so no group is split; 0: the whole batch at once"""
    dtype: str = "float32"
    """float32, bfloat16 or mixed_bfloat16 (float32 weights, bfloat16 compute): DTYPES"""
    gradient_checkpointing: bool = False
    from_arch: str = field(default="warm_start", metadata=IF_SET)
    """with task.model_path empty: warm_start, random or refuse (FROM_ARCH)"""
    eval_batch: int = field(default=512, metadata=IF_SET)
    """completions sampled at once in an evaluation (eval_batch // eval_k prompts): their
    KV cache is the evaluation's memory"""
    warm_start_steps: int = 0
    """supervised steps of a built model on train-split solutions before RL (0: none)"""
    warm_start_size: int = 0
    """train problems the warm start sees (0: the whole train split)"""
    warm_start_lr: float = 1e-3
    warm_start_batch: int = 64
    base_seed: int = 0
    """a built model's initialisation and warm-start minibatches"""
    data_seed: int = 0
    """the train and held-out splits (data, not the run's seed: every seed sees one split)"""
    data_dir: str = field(default="", metadata=NOT_IDENTITY)
    """GSM8K's folder (tasks/_problems.py)"""
    base_dir: str = field(default="", metadata=NOT_IDENTITY)
    """where built bases are cached (empty: $TPO_BENCH_LLM_CACHE or ~/.cache/tpo-bench/llm-base)"""
    # Groups are independent prompts: Batch.take/concat split and join them (DAPO).
    splits_groups: ClassVar[bool] = True

    def __post_init__(self):
        _problems.check_dataset(self.dataset)
        positive(self, "train_size", "test_size", "prompts_per_step", "max_new_tokens",
                  "eval_every", "eval_k", "warm_start_batch", "eval_batch")
        for key in ("lora_rank", "micro_batch", "warm_start_steps", "warm_start_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"task.{key} must be an integer >= 0, got {value!r}")
        if not self.temperature > 0:
            raise ValueError(f"task.temperature={self.temperature!r} must be > 0 (log-probs are "
                             "of softmax(logits / temperature))")
        if self.kl_ref < 0:
            raise ValueError(f"task.kl_ref={self.kl_ref!r} must be >= 0")
        if self.dtype not in DTYPES:
            raise ValueError(f"task.dtype={self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.from_arch not in FROM_ARCH:
            raise ValueError(f"task.from_arch={self.from_arch!r} is not one of {', '.join(FROM_ARCH)}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"task.prompt_format={self.prompt_format!r} is not one of "
                             f"{', '.join(PROMPT_FORMATS)}")
        self._check_model()
        self.problems("train")  # a bad dataset_config or question_prefix is refused here

    def _check_model(self) -> None:
        """The model and tokenizer are refused here, before any work: a path that is not a
        model directory, a tokenizer with ids past the model's vocabulary, missing facts."""
        if self.model_path:
            if self.from_arch == "random":
                raise ValueError("task.from_arch=random builds random weights from task.arch; "
                                 "task.model_path gives weights: set one of them")
            config = _lm.check_model_dir(self.model_path)
            if self.warm_start_steps:
                raise ValueError("task.warm_start_steps: the warm start is for a model built from "
                                 "task.arch; a model from task.model_path is its own base")
            tok = _lm.load_tokenizer(self.tokenizer_path or self.model_path,
                                     "task.tokenizer_path" if self.tokenizer_path else "task.model_path")
            _lm.check_vocab(tok, config.get("vocab_size", 0),
                            "task.tokenizer_path" if self.tokenizer_path else "task.model_path")
            return
        if self.from_arch == "refuse":
            raise ValueError(
                f"task.model_path is empty: task={self.name} starts from the pretrained model "
                "whose architecture task.arch gives; set task.model_path to its local Hugging "
                "Face directory (e.g. task.model_path=/path/to/Qwen3-1.7B; weights are never "
                "downloaded). That architecture with random weights is for memory and "
                f"throughput only: python -m tpo_bench.tools.llm_scale task={self.name}")
        if self.from_arch == "random" and self.warm_start_steps:
            raise ValueError("task.warm_start_steps: task.from_arch=random builds random weights "
                             "without a warm start; set it to 0 or task.from_arch=warm_start")
        if "model_type" not in self.arch or "vocab_size" not in self.arch:
            raise ValueError("task.model_path is empty, so the model is built from task.arch, "
                             "which must give model_type and vocab_size (conf/task/arch/*.yaml)")
        if self.tokenizer_path:
            raise ValueError("task.tokenizer_path: a model built from task.arch uses the "
                             "character tokenizer; set task.model_path for a model of your own")
        _lm.check_vocab(_lm.char_tokenizer(), self.arch["vocab_size"], "task.arch.vocab_size")
        if self.prompt_format == "chat":
            raise ValueError("task.prompt_format=chat: the character tokenizer has no chat "
                             "template; use raw")

    def check_algorithm(self, req: Request) -> None:
        if req.needs == "label":
            raise ValueError(f"{req.name} is a supervised oracle and needs a labelled task; "
                             f"task {self.name!r} has a verifier, not a label")
        if req.level == "token":
            raise ValueError(f"{req.name} groups next-token candidates (algo.level=token); a "
                             f"completion's tokens have no verifier of their own on task "
                             f"{self.name!r}: use the sequence-level method")
        if self.micro_batch:
            total = self.prompts_per_step * req.k
            if self.micro_batch % req.k or total % self.micro_batch:
                raise ValueError(
                    f"task.micro_batch={self.micro_batch} does not hold whole groups of algo.k="
                    f"{req.k} completions dividing the batch's {self.prompts_per_step} x {req.k} = "
                    f"{total}: a group is never split across micro-batches (TPO's loss is per "
                    f"group); use a multiple of {req.k} that divides {total}")

    # ------------------------------------------------------------ model

    def base_recipe(self) -> dict[str, Any]:
        """What a built base is a function of (its cache key)."""
        return {"version": BASE_RECIPE_VERSION, "arch": self.arch, "tokenizer": "char",
                "dataset": self.dataset, "dataset_config": self.dataset_config,
                "train_size": self.train_size,
                "warm_start": {"steps": self.warm_start_steps, "size": self.warm_start_size,
                               "lr": self.warm_start_lr, "batch": self.warm_start_batch,
                               "seed": self.base_seed}, "data_seed": self.data_seed}

    def base_path(self, rebuild: bool = False) -> str:
        """The model directory RL starts from: task.model_path, or the built base's cache."""
        if self.model_path:
            return self.model_path
        train = self.problems("train")
        n = self.warm_start_size or len(train)
        pairs = [(p.prompt, _problems.solution(self.dataset, p)) for p in train[:n]]
        return str(_lm.build_tiny_base(self.base_recipe(), pairs, self.base_dir, rebuild))

    def make_policy(self, gen: torch.Generator) -> _lm.LMPolicy:
        # The base is the experiment's given: seeds vary prompts, samples and LoRA's init.
        weights = DTYPES[self.dtype][0]
        if not self.model_path and self.from_arch == "random":
            model, tok = _lm.from_arch(self.arch, weights, self.base_seed), _lm.char_tokenizer()
        else:
            model, tok = _lm.load_base(self.base_path(), self.tokenizer_path, weights)
        return _lm.make_policy(model, tok, self.lora_rank, self.gradient_checkpointing, gen)

    def compute(self, device) -> contextlib.AbstractContextManager:
        return compute(self.dtype, device)

    # ------------------------------------------------------------ data

    def problems(self, split: str) -> list[_problems.Problem]:
        size = self.train_size if split == "train" else self.test_size
        found = _problems_cached(self.dataset, split, size, self.data_seed,
                                 _freeze(self.dataset_config), self.data_dir)
        if not self.question_prefix:
            return found
        n = len(self.question_prefix)
        for p in found:
            if not p.prompt.startswith(self.question_prefix):
                raise ValueError(f"task.question_prefix={self.question_prefix!r}: the {split} "
                                 f"question {p.prompt!r} does not start with it")
        return [dataclasses.replace(p, prompt=p.prompt[n:]) for p in found]

    def _prompt_text(self, tokenizer, question: str) -> str:
        if self.prompt_format == "raw":
            return question
        return tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                             tokenize=False, add_generation_prompt=True)

    def _complete(self, policy: _lm.LMPolicy, problems: list, k: int, gen: torch.Generator,
                  device) -> dict[str, torch.Tensor]:
        """k completions of each problem's prompt, their scores and what the batch needs."""
        tok = policy.tokenizer
        ids, att = _lm.encode_prompts(tok, [self._prompt_text(tok, p.prompt) for p in problems], device)
        with self.compute(device):
            out = _lm.sample(policy.model, ids.repeat_interleave(k, 0), att.repeat_interleave(k, 0),
                             self.max_new_tokens, self.temperature, tok.eos_token_id, tok.pad_token_id, gen)
        texts = tok.batch_decode([row[m].tolist() for row, m in zip(out["tokens"], out["mask"])],
                                 skip_special_tokens=True)
        scores = torch.tensor([_problems.score(self.dataset, text, problems[i // k])
                               for i, text in enumerate(texts)], device=device)
        return {**out, "ids": ids, "att": att, "scores": scores.view(len(problems), k)}

    # ------------------------------------------------------------ the contract

    def rollout(self, policy: _lm.LMPolicy, req: Request, streams: Streams) -> Rollout:
        train = self.problems("train")
        device = streams.data.device
        pick = torch.randint(0, len(train), (self.prompts_per_step,), generator=streams.data,
                             device=device).tolist()
        N, k, T = self.prompts_per_step, req.k, self.max_new_tokens
        c = self._complete(policy, [train[i] for i in pick], k, streams.action, device)
        mask = c["mask"].view(N, k, T)
        logp_old = c["logp"].view(N, k, T)
        # micro_batch completions per forward, as in training: the whole batch at once is
        # the memory the micro-batches are there to avoid
        with policy.reference() as ref, self.compute(device):
            logp_ref = _lm.completion_logp_chunked(ref, c["ids"].repeat_interleave(k, 0),
                                                   c["att"].repeat_interleave(k, 0), c["tokens"],
                                                   c["mask"], self.temperature, self.micro_batch).view(N, k, T)
        scores, m = c["scores"], mask.float()
        rewards = scores.unsqueeze(-1) * m  # the verifier's score on every real token
        obs = LMObs(c["ids"], c["att"], c["tokens"].view(N, k, T))
        success = scores >= 1.0
        if k == 1:
            advantages = (scores - scores.mean()).unsqueeze(-1) * m
            batch = Batch.single_samples(logp_old[:, 0], rewards[:, 0], advantages[:, 0], success[:, 0],
                                         scores=scores[:, 0], mask=mask[:, 0], logp_ref=logp_ref[:, 0], obs=obs)
        else:
            batch = Batch.sampled_group(logp_old, rewards, success, scores=scores, mask=mask,
                                        logp_ref=logp_ref, obs=obs)
        metrics = {"response_length": float(m.sum(-1).mean()),
                   "entropy": float(batch.step_mean(c["entropy"].view(batch.logp_old.shape))),
                   "kl_ref": float(reference_kl(batch, batch.logp_old))}
        reward_mean = scores.mean()
        return Rollout(batch, error=1.0 - reward_mean, reward_mean=reward_mean, rollouts=N * k,
                       tokens=int(m.sum()), metrics=metrics)

    def logprobs(self, policy: _lm.LMPolicy, batch: Batch) -> torch.Tensor:
        obs = batch.obs
        N, K, T = obs.tokens.shape
        with self.compute(obs.tokens.device):
            lp = _lm.completion_logp(policy.model, obs.prompt_ids.repeat_interleave(K, 0),
                                     obs.prompt_mask.repeat_interleave(K, 0), obs.tokens.view(N * K, T),
                                     batch.step_mask().view(N * K, T), self.temperature)
        return lp.view(N, K, T)

    @torch.no_grad()
    def evaluate(self, policy: _lm.LMPolicy) -> dict[str, float]:
        """Held-out pass@1 (mean success of eval_k samples per prompt) and pass@k (a prompt
        solved by any of them), at the training temperature; test_error = 1 - pass@1."""
        test = self.problems("test")
        device = next(policy.model.parameters()).device
        gen = torch.Generator(device=device).manual_seed(self.eval_seed)
        chunk = max(1, self.eval_batch // self.eval_k)
        solved = torch.cat([self._complete(policy, test[i:i + chunk], self.eval_k, gen, device)["scores"] >= 1.0
                            for i in range(0, len(test), chunk)])
        pass1 = float(solved.float().mean())
        return {"pass_at_1": pass1, "pass_at_k": float(solved.any(-1).float().mean()),
                "test_error": 1.0 - pass1}


def compute(dtype: str, device) -> contextlib.AbstractContextManager:
    """The precision forwards run in under task.dtype: bfloat16 autocast for
    mixed_bfloat16, else the weights' own dtype."""
    autocast = DTYPES[dtype][1]
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=autocast)


def _freeze(d: dict) -> tuple:
    return tuple(sorted((k, _freeze(v) if isinstance(v, dict) else v) for k, v in d.items()))


_PROBLEMS: dict[tuple, list] = {}


def _problems_cached(dataset: str, split: str, size: int, seed: int, config: tuple,
                     data_dir: str) -> list:
    """A split is generated once per process (every episode draws from it)."""
    key = (dataset, split, size, seed, config, data_dir)
    if key not in _PROBLEMS:
        _PROBLEMS[key] = _problems.problems(dataset, split, size, seed=seed,
                                            config=dict(config), data_dir=data_dir)
    return _PROBLEMS[key]
