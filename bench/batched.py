"""Seed-batched jobs: `batch_seeds=true` trains a job's `seeds_per_job` seeds as one computation.

Per seed, exactly as a single run (bench.runner.Seat): run directory, lock, checkpoint,
resume, summary, metrics, random streams, policy module and optimizer state. Batched: the
model arithmetic (the task's `rollout_seeds`/`logprobs_seeds` run the S policies stacked,
each seed sampling from its own generators in a single run's order), the loss (`algo.loss`
vmapped over the seed axis, `seed_losses`; shape-changing dynamic-sampling top-ups run per
seed), one optimizer update for all seeds (bench.optim.step_seeds), and reading the metrics
(once per episode). `compile=true` captures each epoch's forward and loss (`captured`).
A task without `rollout_seeds` (the LLM task) is refused at build time. On the CPU at one
thread each seed equals its single run bit for bit (tests/test_batched.py; MNIST where
B x width is a multiple of 4 floats); more threads or a GPU differ in the last bits.
A seed that fails fails alone; a stop request is read once per step, so every seed
checkpoints at that boundary or none.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch

from tpo_bench.algorithms import OVER_EPOCHS
from tpo_bench.bench import debug, dynamic, interrupts, rundir
from tpo_bench.bench.build import RunSpec
from tpo_bench.bench.optim import step_seeds
from tpo_bench.bench.runner import (EpisodeRow, Seat, as_kept, claim_run, close_seat, failure, flat_params,
                                    group_diagnostics_seeds, open_seat, read_rows, record_step, start_seat,
                                    train_episode)
from tpo_bench.contract import schema
from tpo_bench.contract.batch import Batch, Request


def train_episodes(task, algo, request: Request, policies: list, opts: list,
                   streams: list, compile: bool = False) -> list[dict[str, float]]:
    """bench.runner.train_episode for S seeds at once: one row per seed, each the row its
    single run would give (the same bookkeeping, runner.EpisodeRow), all S rows read from
    the device at once. `compile`: each epoch's forward and loss run captured
    (`captured`), where the batch has its full, fixed shape."""
    if len(policies) == 1:  # one seed left to train (the others skipped or failed): its own path
        return [train_episode(task, algo, request, policies[0], opts[0], streams[0])]
    ros = task.rollout_seeds(policies, request, streams)
    firsts = [ro.batch for ro in ros]
    extras: list[dict[str, float]] = [{} for _ in policies]
    if getattr(algo, "dynamic_sampling", 0):
        for s, (policy, st) in enumerate(zip(policies, streams)):
            ros[s], extras[s] = dynamic.top_up(
                ros[s], lambda policy=policy, st=st: task.rollout(policy, request, st.extra()),
                algo.dynamic_sampling)
    before = _norms(policies, _trained, flat=True)  # the trained parameters, [S, P]
    stacked = before[0] is not None
    books = [EpisodeRow(before[s] if stacked else flat_params(p), dict(extra))
             for s, (p, extra) in enumerate(zip(policies, extras))]
    batches = [ro.batch for ro in ros]
    forward = captured(task, algo, policies) if compile and not getattr(algo, "dynamic_sampling", 0) else None
    over: dict[str, torch.Tensor] = {}  # OVER_EPOCHS metrics summed over the epochs, [S]
    for epoch in range(algo.epochs):
        if forward is not None:
            losses, metrics = forward(batches)
        else:
            losses, metrics = seed_losses(algo, batches, task.logprobs_seeds(policies, batches))
        for policy in policies:  # the optimizers' parameters: opt.zero_grad's, unprofiled
            policy.zero_grad(set_to_none=True)
        # d(sum)/d(loss_s) = 1 exactly, and no loss reaches another seed's parameters.
        losses.sum().backward()
        kept = as_kept(losses).unbind()
        for k in OVER_EPOCHS:  # EpisodeRow.after_backward's sum, for all seeds at once
            if k in metrics:
                over[k] = over.get(k, 0.0) + as_kept(metrics[k])
        norms = _norms(policies, lambda p: p.grad) if epoch == 0 else [None] * len(policies)
        norms = as_kept(norms) if isinstance(norms, torch.Tensor) else norms
        for s, (book, policy) in enumerate(zip(books, policies)):
            book.after_backward(epoch, task, policy, kept[s],
                                {k: v[s] for k, v in metrics.items() if k not in OVER_EPOCHS}, norms[s])
        step_seeds(opts)  # one update for all seeds (bench.optim)
    stacked_rows: list[dict[str, Any]] = [{} for _ in policies]
    means = {k: (total / algo.epochs).unbind() for k, total in over.items()}
    for s, row in enumerate(stacked_rows):
        row["over_epochs"] = {k: v[s] for k, v in means.items()}
    if stacked:
        change = as_kept((_norms(policies, _trained, flat=True) - before).norm(dim=1))
        for s, row in enumerate(stacked_rows):
            row["param_change"] = change[s]
    if len({f.success.shape for f in firsts}) == 1 and len({f.scores.shape for f in firsts}) == 1:
        for row, diagnostics in zip(stacked_rows, group_diagnostics_seeds(firsts)):
            row["diagnostics"] = diagnostics
    return read_rows([book.finish(algo.epochs, ro, first, policy, row) for book, ro, first, policy, row
                      in zip(books, _kept_rollouts(ros), firsts, policies, stacked_rows)])


def _trained(p: torch.Tensor) -> torch.Tensor | None:
    return p.detach() if p.requires_grad else None  # as runner.flat_params


def _norms(policies: list, of, flat: bool = False):
    """Per seed, the norm of `of(p)` over its parameters p (None left out): a slice of
    one [S, P] norm, as each seed's own over its flat vector rounds (rows reduce alike;
    tests/test_batched.py). `flat`: the [S, P] flat vectors instead. [None] * S where the
    seeds' sets of tensors differ in size."""
    flats = [[x.reshape(-1) for p in pol.parameters() if (x := of(p)) is not None] for pol in policies]
    sizes = {sum(x.numel() for x in f) for f in flats}
    if len(sizes) != 1 or not sizes.pop():
        return [None] * len(policies)
    rows = torch.cat([x for f in flats for x in f]).view(len(policies), -1)
    return rows if flat else rows.norm(dim=1)


def _kept_rollouts(ros: list) -> list:
    """The rollouts with their error and mean reward kept (runner.as_kept) in one conversion
    for all seeds, where each is a 0-d tensor."""
    keys = ("error", "reward_mean")
    if not all(isinstance(getattr(ro, k), torch.Tensor) and getattr(ro, k).dim() == 0
               for ro in ros for k in keys):
        return ros
    kept = {k: as_kept(torch.stack([getattr(ro, k) for ro in ros])).unbind() for k in keys}
    return [dataclasses.replace(ro, **{k: v[s] for k, v in kept.items()}) for s, ro in enumerate(ros)]


def seed_losses(algo, batches: list[Batch], logps: list[torch.Tensor]):
    """Each seed's `algo.loss` as one computation over a leading seed axis: the losses
    [S] and each metric [S] (kept: detached, float64). torch.func.vmap over the
    algorithm's own loss, so each algorithm stays one function of one batch, readable
    next to its equation, and needs no seed-axis variant; its batching rules run every
    op once for all seeds. Seeds whose batches differ in shape (dynamic sampling keeps
    what it finds) are evaluated one by one, as is an algorithm vmap cannot trace."""
    first = batches[0]
    fields = {k: v for k, v in _tensor_fields(first).items() if v is not None}
    same = all({k: v.shape for k, v in _tensor_fields(b).items() if v is not None} ==
               {k: v.shape for k, v in fields.items()} for b in batches) and \
        len({lp.shape for lp in logps}) == 1
    if same and type(algo) not in NOT_VMAPPABLE:
        stacked = {k: torch.stack([getattr(b, k) for b in batches]) for k in fields}
        names: list[str] = []

        def one(tensors, logp):
            out = algo.loss(dataclasses.replace(first, **tensors, obs=None), logp)
            names[:] = list(out.metrics)
            return out.loss, [torch.as_tensor(v, dtype=logp.dtype, device=logp.device)
                              for v in out.metrics.values()]
        try:
            loss, values = torch.func.vmap(one)(stacked, torch.stack(logps))
        except RuntimeError as e:  # a data-dependent op in the loss: it stays per seed
            if "vmap" not in str(e):
                raise
            NOT_VMAPPABLE.add(type(algo))
        else:
            return loss, {k: as_kept(v) for k, v in zip(names, values)}
    outs = [algo.loss(b, lp) for b, lp in zip(batches, logps)]
    keys = list(outs[0].metrics)
    return torch.stack([o.loss for o in outs]), {
        k: torch.stack([torch.as_tensor(as_kept(o.metrics[k]), dtype=torch.float64) for o in outs])
        for k in keys}


NOT_VMAPPABLE: set[type] = set()

# torch.compile's backend for `captured` (a test may take "aot_eager": the same capture,
# no code generation).
COMPILE_BACKEND = "inductor"
CAPTURED: dict = {}


def captured(task, algo, policies: list):
    """The epoch's log-prob forward and loss (logprobs_seeds + seed_losses) as one
    torch.compile'd function of the batches, mode "reduce-overhead" on CUDA (a CUDA graph
    replayed each epoch); its backward is compiled with it (AOTAutograd). Shapes are
    fixed per config (dynamic=False): a batch that dynamic sampling topped up runs eager
    (train_episodes asks for this only without top-ups). Backward's accumulation and the
    optimizer step stay eager. Cached per (task, algo, seed set)."""
    key = (id(task), id(algo), tuple(id(p) for p in policies))
    if key not in CAPTURED:
        cuda = next(policies[0].parameters()).device.type == "cuda"

        def forward(batches):
            return seed_losses(algo, batches, task.logprobs_seeds(policies, batches))
        CAPTURED.clear()  # one seed set at a time: a seed leaving the batch recaptures
        CAPTURED[key] = torch.compile(forward, backend=COMPILE_BACKEND, dynamic=False,
                                       mode="reduce-overhead" if cuda and COMPILE_BACKEND == "inductor" else None)
    return CAPTURED[key]


def _tensor_fields(batch: Batch) -> dict[str, torch.Tensor | None]:
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch) if f.name != "obs"}


# ---------------------------------------------------------------- the job

def run(specs: list[RunSpec], compile: bool = False) -> list[dict[str, Any]]:
    """bench.runner.run for a job's seeds, trained together; one summary per spec, in
    order. Completed seeds are skipped and seeds another process holds are left to it,
    each as a single run would be; the rest train as one batch (`compile`: captured
    epochs, train_episodes)."""
    rds = [rundir.RunDir(s.run_dir, pause_s=s.debug.get("checkpoint_pause", 0.0)) for s in specs]
    answers: dict[int, dict[str, Any]] = {}
    try:
        claimed = []
        for i, (spec, rd) in enumerate(zip(specs, rds)):
            prev, answer = claim_run(spec, rd)
            if answer is None:
                claimed.append((i, spec, rd, prev))
            else:
                answers[i] = answer
        if claimed:
            with interrupts.Boundary() as boundary:
                _attempt(claimed, boundary, answers, compile)
    except interrupts.Interrupted as e:  # each seed as it recorded itself (a sweep reports them)
        e.answers = [answers.get(i) or {"run_dir": str(s.run_dir), "status": schema.INTERRUPTED,
                                        "reason": e.signame} for i, s in enumerate(specs)]
        raise
    finally:
        for rd in rds:
            rd.release()
    return [answers[i] for i in range(len(specs))]


@dataclass
class _Seats:
    """The seats still in a batch (training, or waiting to join it) and the answers of the
    seeds that left it. A seat leaves when it ends: its record is closed and its lock
    released there and then, so that another process may take a failed seed up while the
    batch trains on."""

    live: dict[int, Seat]
    answers: dict[int, dict[str, Any]]

    def end(self, i: int, status: str, reason: str | None = None, kind: str | None = None) -> None:
        seat = self.live.pop(i)
        self.answers[i] = close_seat(seat, status, reason, kind)
        seat.rd.release()


def _attempt(claimed: list, boundary: interrupts.Boundary, answers: dict[int, dict[str, Any]],
             compile: bool = False) -> None:
    """bench.runner._attempt for the claimed seeds: each opened (or refused) and closed on
    its own, trained together; their summaries go into `answers`, even when interrupted."""
    seats = _Seats({}, answers)
    for i, spec, rd, prev in claimed:
        seat = open_seat(spec, rd, prev, batched=True)
        if isinstance(seat, dict):
            answers[i] = seat
        else:
            seats.live[i] = seat
    verdict: tuple[str, str | None, str | None] = (schema.COMPLETED, None, None)
    try:
        _train(seats, boundary, compile)
    except Exception as e:  # not one seed's (the batched episode, an evaluation): each records it
        verdict = failure(e)
    except BaseException as e:  # interrupted: every seat still open is resumable
        verdict = (schema.INTERRUPTED, getattr(e, "signame", type(e).__name__), None)
        raise
    finally:
        for i in list(seats.live):
            seats.end(i, *verdict)


def _train(seats: _Seats, boundary: interrupts.Boundary, compile: bool = False) -> None:
    """bench.runner._train over seats in lockstep; a seat that fails alone leaves the
    batch with its verdict (`_Seats.end`)."""
    for i, seat in list(seats.live.items()):
        try:  # a damaged checkpoint fails its own seed only
            start_seat(seat)
        except Exception as e:
            seats.end(i, *failure(e))
    if not seats.live:
        return
    first = next(iter(seats.live.values())).spec
    task, algo, request = first.task, first.algo, first.request
    for step in range(min(s.start for s in seats.live.values()), task.episodes):
        for i, seat in list(seats.live.items()):
            if seat.start > step:  # waiting to join: alive all the same, as its heartbeat says
                try:
                    seat.rd.beat_if_due()
                except Exception as e:
                    seats.end(i, *failure(e))
        active = {i: s for i, s in seats.live.items() if s.start <= step}
        if not active:  # every seat so far has failed; a later-resuming one may still join
            continue
        for seat in active.values():
            if seat.start == step:  # its clock starts when it joins
                seat.t0 = time.perf_counter()
        # An error here is not one seed's: the seeds waiting to join would meet it too.
        rows = train_episodes(task, algo, request, [s.policy for s in active.values()],
                              [s.opt for s in active.values()], [s.streams for s in active.values()],
                              compile)
        checkpointed, asked = False, boundary.pending  # once: every seat checkpoints or none
        for (i, seat), row in zip(active.items(), rows):
            try:
                row = debug.inject(lambda row=row: row, seat.spec.debug)(step)
                checkpointed |= record_step(seat, step, row, asked, boundary.why)
            except Exception as e:
                seats.end(i, *failure(e))
        if checkpointed:  # after every seat's checkpoint: a stop then leaves all resumable
            boundary.after_checkpoint()
