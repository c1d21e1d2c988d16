"""The engine: the one epoch loop, `train_episodes`, and the bookkeeping of its rows;
bench.runner holds the job loop and each seed's duties. A single run is a seed batch of
one (S = 1; `train_episode`): there is one path. Per seed, whatever S: random streams,
policy, optimizer state, metrics row (EpisodeRow). The model arithmetic (the task's
`rollout_seeds`/`logprobs_seeds`), the loss (`seed_losses`) and one optimizer update
(bench.optim.step_seeds) run over a seed axis; `compile=true` captures each epoch's
forward and loss (`captured`). On the CPU at one thread each seed of a batch equals its
single run bit for bit (tests/test_batched.py); a GPU differs in the last bits.

    train_episodes  one episode of S seeds: rows, one per seed
    train_episode   one seed's episode (train_episodes at S = 1; tools and tests)
    EpisodeRow      a seed's row as its epochs go by; read_rows reads its tensors
    backward        S seeds' full-batch gradients (micro-batches, the task's KL penalty)
    seed_losses     the loss of S seeds as one vmapped computation; captured: compiled
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from ..algorithms import OVER_EPOCHS
from . import dynamic
from .optim import step_seeds
from ..contract import schema
from ..contract.batch import Batch, Request, Rollout, logprobs, reference_kl, rollouts, stack_seeds
from ..contract.rng import Streams


# ---------------------------------------------------------------- one episode

def train_episodes(task, algo, request: Request, policies: list, opts: list, streams: list,
                   compile: bool = False, clock: dict[str, float] | None = None) -> list[dict[str, float]]:
    """One episode of S seeds (science §Update rules): sample, then algo.epochs full-batch
    optimizer steps on the batch; one metrics row per seed (EpisodeRow), all S read from
    the device at once (`read_rows`). Loss and gradient norm are the first epoch's (before
    any update on this batch), the OVER_EPOCHS metrics the mean over epochs; `group_size`
    is the K the batch really had.

    Whatever S (a single run is S = 1; `train_episode`), one computation over a seed axis:
    the task's rollout_seeds (contract.batch.rollouts), each epoch's log-probs and loss
    with the task's KL penalty over micro-batches (`backward`), one update (step_seeds),
    the norms and means as slices of [S] tensors. `compile`: each epoch's forward and loss
    run captured (`captured`), where the batch has its full, fixed shape. `clock`, if
    given, accumulates seconds per phase (the speed benchmark)."""
    device = next(policies[0].parameters()).device
    t0 = _phase_mark(clock, device)
    ros = rollouts(task, policies, request, streams)
    firsts = [ro.batch for ro in ros]  # what the error and the group diagnostics describe
    extras: list[dict[str, float]] = [{} for _ in policies]
    if algo.dynamic_sampling:  # shape-changing top-ups: per seed
        for s, (policy, st) in enumerate(zip(policies, streams)):
            ros[s], extras[s] = dynamic.top_up(
                ros[s], lambda policy=policy, st=st: task.rollout(policy, request, st.extra()),
                algo.dynamic_sampling)
    t1 = _phase_mark(clock, device)
    params = [list(p.parameters()) for p in policies]  # walked once an episode
    before = _flat(params, _trained, copy=True)  # [S, P], or None: then per seed
    books = [EpisodeRow(flat_params(p) if before is None else None, dict(extra))
             for p, extra in zip(policies, extras)]
    batches = [ro.batch for ro in ros]
    kl_ref = task.kl_ref if batches[0].logp_ref is not None else 0.0
    forward = captured(task, algo, policies, kl_ref) if compile and not algo.dynamic_sampling else None
    over: dict[str, Any] = {}  # OVER_EPOCHS metrics ([S]) summed over the epochs
    for epoch in range(algo.epochs):
        for p in itertools.chain.from_iterable(params):  # Module.zero_grad(set_to_none=True)
            p.grad = None
        losses, metrics = backward(task, algo, policies, batches, kl_ref, forward)
        for k in OVER_EPOCHS:
            if k in metrics:
                over[k] = over.get(k, 0.0) + metrics[k]
        if epoch == 0:  # the row's loss, metrics and gradient norm: at the behaviour policy
            grads = _flat(params, _grad)
            norms = None if grads is None else as_kept(grads.norm(dim=1))
            for s, (book, policy) in enumerate(zip(books, policies)):
                book.first_epoch(task, policy, Slice(losses, s), {k: Slice(v, s) for k, v in metrics.items()
                                                                  if k not in OVER_EPOCHS},
                                 None if norms is None else Slice(norms, s))
        step_seeds(opts)  # one update for all seeds (bench.optim)
    t2 = _phase_mark(clock, device)
    means = {k: total / algo.epochs for k, total in over.items()}
    shared: list[dict[str, Any]] = [{"over_epochs": {k: Slice(v, s) for k, v in means.items()}, "scores": scores}
                                    for s, scores in enumerate(_kept_scores(ros))]
    if before is not None:
        change = as_kept((_flat(params, _trained) - before).norm(dim=1))
        for s, row in enumerate(shared):
            row["param_change"] = Slice(change, s)
    if len(firsts) > 1 and len({f.success.shape for f in firsts}) == 1 and \
            len({f.scores.shape for f in firsts}) == 1:  # one seed: its own (finish)
        for row, diagnostics in zip(shared, group_diagnostics_seeds(firsts)):
            row["diagnostics"] = diagnostics
    rows = read_rows([book.finish(ro, first, policy, row) for book, ro, first, policy, row
                      in zip(books, ros, firsts, policies, shared)])
    if clock is not None:
        t3 = time.perf_counter()
        for phase, dt in (("generation", t1 - t0), ("training", t2 - t1), ("bookkeeping", t3 - t2)):
            clock[phase] = clock.get(phase, 0.0) + dt
    return rows


def _phase_mark(clock: dict[str, float] | None, device: torch.device) -> float:
    """The time a phase ends, for `clock`. A GPU runs behind the host, so with a clock
    (benchmarks only: a run never waits here) the queued kernels finish first; otherwise
    one phase's work would be counted in the next one's."""
    if clock is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _group_diagnostics(batch: Batch) -> dict[str, torch.Tensor | float]:
    """science §Measurement: all-fail and zero-variance fractions (NaN for single samples), left on the
    device (`read_rows` reads them)."""
    success = as_kept(batch.success.any(-1).float().mean())
    out = {"success_prompt_frac": success, "all_fail_frac": math.nan, "zero_var_frac": math.nan}
    if batch.group_size > 1:
        out["all_fail_frac"] = 1.0 - success
        out["zero_var_frac"] = (batch.scores.std(-1, correction=0) < schema.ZERO_VAR_STD).float().mean()
    return out


def group_diagnostics_seeds(batches: list[Batch]) -> list[dict[str, Slice | float]]:
    """`_group_diagnostics` of S batches of one shape, each a slice of one stacked
    computation (a row's mean rounds as its own tensor's: rows reduce alike)."""
    success = as_kept(stack_seeds([b.success for b in batches]).any(-1).float().mean(-1))
    out = {"success_prompt_frac": success, "all_fail_frac": None, "zero_var_frac": None}
    if batches[0].group_size > 1:
        out["all_fail_frac"] = 1.0 - success
        spread = stack_seeds([b.scores for b in batches]).std(-1, correction=0)
        out["zero_var_frac"] = as_kept((spread < schema.ZERO_VAR_STD).float().mean(-1))
    return [{k: math.nan if v is None else Slice(v, s) for k, v in out.items()} for s in range(len(batches))]


class Slice(NamedTuple):
    """Seed s's value in `values`, an [S] tensor of kept values (`as_kept`): a row holds it
    until `read_rows` reads every seed's at once (no per-seed indexing op)."""

    values: torch.Tensor
    s: int


def as_kept(value: torch.Tensor | Slice | float) -> torch.Tensor | Slice | float:
    """A metric as a row keeps it until `read_rows`: a tensor detached, in float64 (the
    arithmetic done on it then rounds as it would on a Python float read at once), a
    Slice as it is (of a kept tensor), a number as a float."""
    if isinstance(value, Slice):
        return value
    return value.detach().double() if isinstance(value, torch.Tensor) else float(value)


def read_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An episode's rows (one per seed) with every tensor and Slice in them read as a Python
    float, all in one transfer: on a GPU, one wait for the device per episode, not one per
    seed and metric. The values are those float() gives, bit for bit."""
    sources: list[torch.Tensor] = []  # each [S] tensor once
    start: dict[int, int] = {}
    at: list[tuple[dict, str, int]] = []
    size = 0
    for row in rows:
        for k, v in row.items():
            if type(v) is Slice:
                t, i = v
            elif isinstance(v, torch.Tensor):
                t, i = v, 0
            else:
                continue
            if (j := start.get(id(t))) is None:
                j = start[id(t)] = size
                sources.append(t)
                size += t.numel()
            at.append((row, k, j + i))
    if at:
        values = torch.cat([t.detach().reshape(-1).double() for t in sources]).tolist()
        for row, k, j in at:
            row[k] = values[j]
    return rows


@dataclass
class EpisodeRow:
    """One seed's metrics row as its episode goes by (train_episodes, for
    one seed or a seed batch alike): the loss, gradient norm and metrics of the first
    epoch (the gradient at the behaviour policy), then what the epochs, the rollout and
    the update were. Values stay tensors (or Slices) until `read_rows`."""

    before: torch.Tensor | None
    """the trained parameters before the episode's first step, where the loop does not
    hold them for all seeds at once (None)"""
    row: dict[str, Any] = field(default_factory=dict)

    def first_epoch(self, task, policy, loss: Slice | torch.Tensor | float, metrics: dict[str, Any],
                    grad_norm: Slice | torch.Tensor | None = None) -> None:
        """The first epoch's loss and metrics (OVER_EPOCHS ones aside: the loop averages
        them), its gradient in policy's .grad (before its step); `grad_norm` that
        gradient's norm where the caller has it (one row of `_flat`)."""
        grads = [p.grad.reshape(-1) for p in policy.parameters() if p.grad is not None] \
            if grad_norm is None else []
        self.row["grad_norm"] = grad_norm if grad_norm is not None else \
            torch.cat(grads).norm() if grads else 0.0
        self.row["loss"] = as_kept(loss)
        self.row.update({k: as_kept(v) for k, v in metrics.items() if k not in OVER_EPOCHS})
        self.row.update(task.grad_metrics(policy))  # e.g. misalignment to an oracle direction

    def finish(self, ro: Rollout, first: Batch, policy, shared: dict[str, Any]) -> dict[str, Any]:
        """The row, once the episode's steps are taken: `ro` what was trained on, `first`
        the episode's own batch (what the group diagnostics describe). `shared`: what the
        loop computed, "over_epochs" (the OVER_EPOCHS means), "scores" (the rollout's error
        and mean reward, kept), and where it computed them for all seeds at once, this
        seed's "param_change" and "diagnostics"."""
        row = self.row
        row.update(shared["over_epochs"])
        row["param_change"] = shared["param_change"] if "param_change" in shared else \
            (flat_params(policy) - self.before).norm()
        row.update(**shared["scores"], rollouts=ro.rollouts,
                   group_size=ro.batch.group_size, **ro.metrics)
        if ro.tokens is not None:
            row["tokens"] = ro.tokens
        row.update(shared["diagnostics"] if "diagnostics" in shared else _group_diagnostics(first))
        return row


def micro_batches(batch: Batch, micro_groups: int) -> list[tuple[Batch, float]]:
    """The batch cut into parts of `micro_groups` whole groups (0: one part), each with
    its share of the groups: gradient accumulation never splits a group (TPO's loss is a
    function of the whole group, science §Language models). A loss that is a mean over groups accumulates
    exactly; a token-mean one is normalised within each part (as TRL's per-device loss)."""
    N = batch.num_groups
    if not micro_groups or micro_groups >= N:
        return [(batch, 1.0)]
    starts = range(0, N, micro_groups)
    return [(batch.take(torch.arange(s, min(s + micro_groups, N), device=batch.scores.device)),
             (min(s + micro_groups, N) - s) / N) for s in starts]


def epoch_forward(task, algo, policies: list, kl_ref: float):
    """An epoch's forward and loss as a function of the S seeds' batches: their log-probs
    (contract.batch.logprobs, checked) and `seed_losses` with the task's KL penalty."""
    def forward(batches: list[Batch]):
        logps = logprobs(task, policies, batches)
        for batch, logp in zip(batches, logps):
            batch.check_logp(logp)
        return seed_losses(algo, batches, logps, kl_ref)
    return forward


def backward(task, algo, policies: list, batches: list[Batch], kl_ref: float,
             forward=None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Each seed's full-batch gradient, accumulated over micro-batches of whole groups
    (`forward` on each part: `captured`, default `epoch_forward`): the losses [S] and each
    metric [S], the groups-weighted means over the parts (kept: `as_kept`). Seeds cut
    otherwise than each other (dynamic sampling's batches of other sizes) go one by one."""
    # task.micro_batch counts completions; the task has checked it holds whole groups.
    parts = [micro_batches(b, task.micro_batch // b.group_size) for b in batches]
    if len({tuple(share for _, share in p) for p in parts}) > 1:
        outs = [backward(task, algo, [p], [b], kl_ref) for p, b in zip(policies, batches)]
        return torch.cat([o[0] for o in outs]), {k: torch.cat([o[1][k] for o in outs]) for k in outs[0][1]}
    forward = forward or epoch_forward(task, algo, policies, kl_ref)
    loss_value, metrics = 0.0, {}
    for cut in zip(*parts):
        share = cut[0][1]
        losses, out = forward([part for part, _ in cut])
        whole = len(parts[0]) == 1
        # d(sum)/d(loss_s) = 1 exactly, and no loss reaches another seed's parameters.
        if isinstance(losses, torch.Tensor):
            (losses if whole else losses * share).sum().backward()
        else:  # each seed's own loss a root of its own (a single run: its loss's backward)
            torch.autograd.backward([loss if whole else loss * share for loss in losses])
            losses = stack_seeds([loss.detach() for loss in losses])
        # The sums start at 0.0 even for one part: 0.0 + -0.0 is 0.0, as the rows have it.
        loss_value = loss_value + as_kept(losses) * share
        for k, v in out.items():
            metrics[k] = metrics.get(k, 0.0) + v * share
    return loss_value, metrics


def train_episode(task, algo, request: Request, policy, opt, streams: Streams,
                  clock: dict[str, float] | None = None) -> dict[str, float]:
    """One seed's episode: `train_episodes` at S = 1."""
    [row] = train_episodes(task, algo, request, [policy], [opt], [streams], clock=clock)
    return row


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """The trained parameters as one detached vector (a LoRA run's frozen base left out:
    it would be copied every episode)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])



# ---------------------------------------------------------------- the seed axis

def _trained(p: torch.Tensor) -> torch.Tensor | None:
    return p.detach() if p.requires_grad else None  # as flat_params


def _grad(p: torch.Tensor) -> torch.Tensor | None:
    return p.grad


def _flat(params: list[list[torch.Tensor]], of, copy: bool = False) -> torch.Tensor | None:
    """Per seed, `of(p)` over its parameters p (None left out) as one flat row: [S, P]
    (a row's norm(dim=1) rounds as the norm of the seed's own flat vector: rows reduce
    alike; tests/test_batched.py). `copy`: rows that later steps leave as they are (else
    one seed's single tensor is a view of it). None where the seeds' sizes differ."""
    flats = [[x.reshape(-1) for p in ps if (x := of(p)) is not None] for ps in params]
    sizes = {sum(x.numel() for x in f) for f in flats}
    if len(sizes) != 1 or not sizes.pop():
        return None
    if len(flats) == 1 and len(flats[0]) == 1 and not copy:
        return flats[0][0].view(1, -1)
    return torch.cat([x for f in flats for x in f]).view(len(flats), -1)


def _kept_scores(ros: list) -> list[dict[str, Any]]:
    """Each rollout's error and mean reward, kept (`as_kept`): in one conversion for all
    seeds where there are several and each is a 0-d tensor."""
    keys = ("error", "reward_mean")
    if len(ros) == 1 or not all(isinstance(getattr(ro, k), torch.Tensor) and getattr(ro, k).dim() == 0
               for ro in ros for k in keys):
        return [{k: as_kept(getattr(ro, k)) for k in keys} for ro in ros]
    kept = {k: as_kept(stack_seeds([getattr(ro, k) for ro in ros])) for k in keys}
    return [{k: Slice(v, s) for k, v in kept.items()} for s in range(len(ros))]


def seed_losses(algo, batches: list[Batch], logps: list[torch.Tensor], kl_ref: float = 0.0):
    """Each seed's `algo.loss`, plus kl_ref times its KL penalty to the reference
    (science §Language models) where kl_ref is set, as one computation over a leading
    seed axis: the losses (an [S] tensor; evaluated one by one, the S 0-d losses, each its
    own root for backward: a single run's graph holds no seed axis) and each metric [S]
    (kept: detached, float64). torch.func.vmap over the algorithm's own loss, so each algorithm stays one function
    of one batch, readable next to its equation, and needs no seed-axis variant; its
    batching rules run every op once for all seeds. One seed (a single run: vmap's
    dispatch would cost more than the loss), seeds whose batches differ in shape (dynamic
    sampling keeps what it finds), an algorithm vmap cannot trace and a batch it cannot
    (a mask's check) are evaluated one by one."""
    def loss(batch, logp):
        out = algo.loss(batch, logp)
        return out.loss + kl_ref * reference_kl(batch, logp) if kl_ref else out.loss, out.metrics

    if len(batches) > 1 and type(algo) not in NOT_VMAPPABLE and _one_shape(batches, logps):
        first = batches[0]
        stacked = {k: torch.stack([getattr(b, k) for b in batches])
                   for k, v in _tensor_fields(first).items() if v is not None}
        names: list[str] = []

        def one(tensors, logp):
            value, metrics = loss(dataclasses.replace(first, **tensors, obs=None), logp)
            names[:] = list(metrics)
            return value, [torch.as_tensor(v, dtype=logp.dtype, device=logp.device)
                           for v in metrics.values()]
        try:
            value, values = torch.func.vmap(one)(stacked, torch.stack(logps))
        except RuntimeError as e:  # a data-dependent op in the loss: it stays per seed
            if "vmap" not in str(e):
                raise
            NOT_VMAPPABLE.add(type(algo))
        else:
            return value, {k: as_kept(v) for k, v in zip(names, values)}
    outs = [loss(b, lp) for b, lp in zip(batches, logps)]
    return [value for value, _ in outs], {
        k: stack_seeds([torch.as_tensor(as_kept(m[k]), dtype=torch.float64) for _, m in outs])
        for k in outs[0][1]}


def _one_shape(batches: list[Batch], logps: list[torch.Tensor]) -> bool:
    """Whether the seeds' batches (each tensor) and log-probs have one shape."""
    shapes = [{k: v.shape for k, v in _tensor_fields(b).items() if v is not None} for b in batches]
    return len({lp.shape for lp in logps}) == 1 and all(shape == shapes[0] for shape in shapes)


NOT_VMAPPABLE: set[type] = set()

# torch.compile's backend for `captured` (a test may take "aot_eager": the same capture,
# no code generation).
COMPILE_BACKEND = "inductor"
CAPTURED: dict = {}


def captured(task, algo, policies: list, kl_ref: float = 0.0):
    """`epoch_forward` (the epoch's log-probs and loss, with the task's KL penalty) as one
    torch.compile'd function of the batches, mode "reduce-overhead" on CUDA (a CUDA graph
    replayed each epoch); its backward is compiled with it (AOTAutograd). Shapes are
    fixed per config (dynamic=False): a batch that dynamic sampling topped up runs eager
    (train_episodes asks for this only without top-ups). Backward's accumulation and the
    optimizer step stay eager. Cached per (task, algo, seed set, KL coefficient)."""
    key = (id(task), id(algo), tuple(id(p) for p in policies), kl_ref)
    if key not in CAPTURED:
        cuda = next(policies[0].parameters()).device.type == "cuda"
        CAPTURED.clear()  # one seed set at a time: a seed leaving the batch recaptures
        CAPTURED[key] = torch.compile(epoch_forward(task, algo, policies, kl_ref), backend=COMPILE_BACKEND,
                                       dynamic=False,
                                       mode="reduce-overhead" if cuda and COMPILE_BACKEND == "inductor" else None)
    return CAPTURED[key]


def _tensor_fields(batch: Batch) -> dict[str, torch.Tensor | None]:
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch) if f.name != "obs"}
