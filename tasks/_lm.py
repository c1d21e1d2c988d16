"""Hugging Face causal LMs for the LLM task family (tasks/llm.py): load or build one,
sample completions, score their tokens.

    LMPolicy          the trained model, its tokenizer and a frozen reference (the initial
                      policy, for the KL to it); state_dict holds the model only
    load_base         a local model directory -> model, tokenizer
    build_tiny_base   a model from architecture facts with a character tokenizer,
                      warm-started on generated solutions, cached by what built it
    sample            K completions per prompt with a KV cache
    completion_logp   per-token log-probs of given completions under a model

Log-probs are of softmax(logits / temperature) over the full vocabulary, in sampling and
training alike (no top-k or top-p: the ratio must compare the sampling distributions).
Completions are padded to T = max_new_tokens, real tokens up to and including EOS.
`transformers` is imported on first use, so the harness runs without the `llm` extra.
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import shutil
import string
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

EXTRA = "pip install -e '.[llm]'"
PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# The character vocabulary: printable ASCII and newline. Fixed, so the tokenizer needs no
# training and every dataset shares it.
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
CACHE_ENV = "TPO_BENCH_LLM_CACHE"


def require(module: str):
    """Import a module of the `llm` extra, or say which extra installs it."""
    try:
        mod = __import__(module)
    except ImportError as e:
        raise ImportError(f"the LLM task family needs {module!r} ({e}); install the extra: "
                          f"{EXTRA}") from None
    if module == "transformers":  # its progress bars would flood a sweep's log
        mod.utils.logging.disable_progress_bar()
    return mod


class LMPolicy(nn.Module):
    """The policy a task trains: `model` is the only submodule (parameters, state_dict);
    the tokenizer and the frozen reference ride along as plain attributes."""

    def __init__(self, model: nn.Module, tokenizer: Any, reference: nn.Module | None,
                 lora: bool):
        super().__init__()
        self.model = model
        object.__setattr__(self, "tokenizer", tokenizer)
        object.__setattr__(self, "_reference", reference)
        object.__setattr__(self, "lora", lora)

    def _apply(self, fn, *args, **kwargs):
        # .to(device) and dtype casts reach the frozen reference too (a plain attribute,
        # kept out of parameters() and state_dict): on a GPU it must sit beside the model.
        super()._apply(fn, *args, **kwargs)
        if self._reference is not None:
            self._reference._apply(fn, *args, **kwargs)
        return self

    @contextlib.contextmanager
    def reference(self):
        """The initial policy: the model with its LoRA adapters off, else the frozen copy."""
        if self.lora:
            with self.model.disable_adapter():
                yield self.model
        else:
            yield self._reference


def _positions(attention: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows: 0 at each row's first real token."""
    return (attention.long().cumsum(-1) - 1).clamp_min(0)


def encode_prompts(tokenizer, prompts: Sequence[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask [N, P]."""
    tokenizer.padding_side = "left"
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


@torch.no_grad()
def sample(model: nn.Module, ids: torch.Tensor, attention: torch.Tensor, max_new_tokens: int,
           temperature: float, eos_id: int, pad_id: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """One completion per row of the left-padded prompts `ids` [M, P] (repeat a prompt K
    times for K completions). Returns tokens, mask (bool), logp (behaviour log-prob of each
    token) and entropy (of the distribution it was drawn from), all [M, T]."""
    M, T = ids.shape[0], max_new_tokens
    tokens = torch.full((M, T), pad_id, dtype=torch.long, device=ids.device)
    logp = torch.zeros(M, T, device=ids.device)
    entropy = torch.zeros(M, T, device=ids.device)
    mask = torch.zeros(M, T, dtype=torch.bool, device=ids.device)
    alive = torch.ones(M, dtype=torch.bool, device=ids.device)
    # logits_to_keep=1: the prompt's other positions predict nothing sampled (their logits
    # would be N K P V numbers, gigabytes at a 150k vocabulary)
    out = model(input_ids=ids, attention_mask=attention, position_ids=_positions(attention), use_cache=True,
                logits_to_keep=1)
    cache, logits = out.cache, out.logits[:, -1]
    pos = _positions(attention)[:, -1:]
    for t in range(T):
        lp = torch.log_softmax(logits.float() / temperature, -1)
        tok = torch.multinomial(lp.exp(), 1, generator=gen)
        tokens[:, t] = torch.where(alive, tok[:, 0], pad_id)
        logp[:, t] = torch.where(alive, lp.gather(-1, tok)[:, 0], 0.0)
        entropy[:, t] = torch.where(alive, -(lp.exp() * lp).sum(-1), 0.0)
        mask[:, t] = alive
        alive = alive & (tok[:, 0] != eos_id)
        if t == T - 1 or not alive.any():
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], 1)
        pos = pos + 1
        out = model(input_ids=tok, attention_mask=attention, position_ids=pos, cache=cache,
                    use_cache=True)
        cache, logits = out.cache, out.logits[:, -1]
    return {"tokens": tokens, "mask": mask, "logp": logp, "entropy": entropy}


def completion_logp(model: nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                    tokens: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """[M, T] log-probs of completions `tokens` after the left-padded prompts `ids` [M, P],
    0 on padded steps. The padding after a completion is fed but predicts nothing counted
    (causal attention: it cannot reach the tokens before it)."""
    T = tokens.shape[1]
    full = torch.cat([attention, torch.ones_like(tokens)], 1)
    # Only the last T + 1 positions' logits: the prompt's last token predicts the first
    # completion token; the prompt's earlier positions predict nothing scored. No KV cache:
    # nothing is generated after this forward.
    logits = model(input_ids=torch.cat([ids, tokens], 1), attention_mask=full,
                   position_ids=_positions(full), logits_to_keep=T + 1, use_cache=False).logits[:, :-1]
    lp = torch.log_softmax(logits.float() / temperature, -1).gather(-1, tokens.unsqueeze(-1))[..., 0]
    return torch.where(mask, lp, torch.zeros_like(lp))


@torch.no_grad()
def completion_logp_chunked(model: nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                            tokens: torch.Tensor, mask: torch.Tensor, temperature: float,
                            rows: int) -> torch.Tensor:
    """completion_logp without gradients, `rows` completions per forward (0: all at once):
    one pass over a whole batch holds its N K (P + T) activations and N K T V logits."""
    rows = rows or ids.shape[0]
    return torch.cat([completion_logp(model, ids[s:s + rows], attention[s:s + rows],
                                      tokens[s:s + rows], mask[s:s + rows], temperature)
                      for s in range(0, ids.shape[0], rows)])


# ---------------------------------------------------------------- models

def check_model_dir(path: str, key: str = "task.model_path") -> dict[str, Any]:
    """The model directory's config.json, or a ValueError naming the key."""
    p = Path(path)
    if not (p / "config.json").is_file():
        what = "does not exist" if not p.exists() else "has no config.json"
        raise ValueError(f"{key}={path!r} {what}: it must be a local Hugging Face model "
                         "directory (config.json, weights, tokenizer files), as save_pretrained "
                         "writes it; weights are never downloaded")
    return json.loads((p / "config.json").read_text())


def check_vocab(tokenizer, vocab_size: int, key: str) -> None:
    """A tokenizer whose ids reach past the model's embedding table is refused."""
    n = len(tokenizer)
    if n > vocab_size:
        raise ValueError(f"{key}: the tokenizer has {n} tokens but the model's vocab_size is "
                         f"{vocab_size}: token ids >= {vocab_size} have no embedding; use the "
                         "tokenizer the model was trained with")


def load_tokenizer(path: str, key: str):
    transformers = require("transformers")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"{key}={path!r}: no tokenizer could be loaded from it ({e})") from None
    if tok.pad_token is None:  # many causal LMs ship without one; EOS pads (masked anyway)
        tok.pad_token = tok.eos_token
    return tok


def load_base(model_path: str, tokenizer_path: str, dtype: torch.dtype):
    transformers = require("transformers")
    tok = load_tokenizer(tokenizer_path or model_path, "task.tokenizer_path" if tokenizer_path
                         else "task.model_path")
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype,
                                                              local_files_only=True)
    return model, tok


def char_tokenizer():
    """A character-level tokenizer (tokenizers' WordLevel over single characters) wrapped as
    a transformers fast tokenizer: saved and loaded like any model's."""
    require("tokenizers")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate([PAD, EOS, UNK, *CHARS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK)


CHAR_VOCAB = 3 + len(CHARS)


def from_arch(arch: dict[str, Any], dtype: torch.dtype, seed: int):
    """A randomly initialised model from architecture facts (a transformers config's
    fields, `model_type` naming the architecture), its initialisation drawn from `seed`."""
    transformers = require("transformers")
    arch = dict(arch)
    model_type = arch.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **arch)
    except (ValueError, KeyError) as e:
        raise ValueError(f"task.arch.model_type={model_type!r}: {e}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()  # as from_pretrained returns one: no dropout while sampling


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def checkpoint_in_eval_mode(model: nn.Module) -> None:
    """transformers recomputes a layer only while the layer is in training mode, and a
    loaded or built model is in eval mode, so checkpointing would be on in name only. The
    checkpointed modules' own flags go to training, not their submodules': dropout stays
    off, so the sampler is the policy that is scored (rescoring matches sampling)."""
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            module.training = True


def make_policy(model: nn.Module, tokenizer, lora_rank: int, gradient_checkpointing: bool,
                gen: torch.Generator | None = None) -> LMPolicy:
    """Wrap a base model for training: LoRA adapters (peft) of rank `lora_rank` on every
    linear layer, their random initialisation drawn from `gen` (peft draws from torch's
    global generator, which no run seeds), or full fine-tuning with a frozen copy as the
    reference."""
    if gradient_checkpointing:
        # activation_checkpointing_enable: gradient_checkpointing_enable's newer name
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.config.use_cache = True  # generation keeps its cache; the forward for training recomputes
        checkpoint_in_eval_mode(model)
    if lora_rank:
        peft = require("peft")
        config = peft.LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
        with torch.random.fork_rng(devices=[]):  # the model is on the CPU here
            if gen is not None:
                torch.manual_seed(int(torch.randint(2**62, (), generator=gen)))
            wrapped = peft.get_peft_model(model, config)
        return LMPolicy(wrapped, tokenizer, None, lora=True)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    return LMPolicy(model, tokenizer, reference, lora=False)


# ---------------------------------------------------------------- the warm-started tiny base

def cache_root(base_dir: str) -> Path:
    if base_dir:
        return Path(base_dir)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tpo-bench" / "llm-base"


def base_key(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def warm_start(model: nn.Module, tokenizer, pairs: Sequence[tuple[str, str]], steps: int, lr: float,
               batch: int, seed: int) -> list[float]:
    """Supervised steps on (prompt, solution) pairs: cross-entropy on the solution's
    tokens and its EOS only (the prompt is context), Adam at `lr`, minibatches drawn from
    `seed`. Returns the loss of each step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in range(steps):
        pick = torch.randint(0, len(pairs), (min(batch, len(pairs)),), generator=gen).tolist()
        ids, att = encode_prompts(tokenizer, [pairs[i][0] for i in pick], "cpu")
        sols = tokenizer([pairs[i][1] + tokenizer.eos_token for i in pick], padding=True,
                         add_special_tokens=False, return_tensors="pt")
        tokens, mask = sols["input_ids"], sols["attention_mask"].bool()
        # Right-padded solutions: their pad steps are masked out of the loss.
        logp = completion_logp(model, ids, att, tokens, mask, 1.0)
        loss = -logp.sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def build_tiny_base(recipe: dict[str, Any], pairs: Sequence[tuple[str, str]], base_dir: str,
                    rebuild: bool = False) -> Path:
    """The directory of the base model `recipe` describes (architecture, data and warm
    start), built on first use and then read: every seed and method of a study starts from
    the same weights. Built under a lock into a temporary folder renamed into place, so a
    sweep's workers build it once and nobody reads a half-written one."""
    root = cache_root(base_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / base_key(recipe)
    with open(root / f"{final.name}.lock", "w") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        if final.is_dir() and not rebuild:
            return final
        tokenizer = char_tokenizer()
        check_vocab(tokenizer, recipe["arch"]["vocab_size"], "task.arch.vocab_size")
        model = from_arch(recipe["arch"], torch.float32, recipe["warm_start"]["seed"])
        ws = recipe["warm_start"]
        losses = warm_start(model, tokenizer, pairs, ws["steps"], ws["lr"], ws["batch"], ws["seed"])
        tmp = root / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "recipe.json").write_text(json.dumps(
            {**recipe, "parameters": param_count(model), "torch_threads": torch.get_num_threads(),
             "torch": torch.__version__, "warm_start_loss_first": losses[0] if losses else None,
             "warm_start_loss_last": losses[-1] if losses else None}, indent=2, sort_keys=True))
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        return final
