"""integrations.adapter: a trainer's rows -> Batch [N, K, T] -> a registered algorithm's own
loss. Shuffled rows give the loss of the natively grouped batch bit for bit (the naive
reshape does not); micro-batches of whole groups sum to the full batch's loss; partial
groups and algorithms that need what a trainer does not carry are refused."""
import pytest
import torch

from tpo_bench.algorithms.grpo import GRPO
from tpo_bench.algorithms.tpo import TPO
from tpo_bench.contract.batch import Batch, reference_kl
from tpo_bench.contract.registry import ALGORITHMS
from tpo_bench.integrations.adapter import PartialGroups, check_fits, regroup, to_batch, zoo_loss

N, K, T = 3, 4, 5


def fits(name):
    try:
        check_fits(ALGORITHMS.get(name)())
        return True
    except ValueError:
        return False


FITTING = [n for n in ALGORITHMS.names() if fits(n)]


def native(seed=0, ref=False):
    """A natively grouped LLM-like batch: ragged completions, scores in [0, 1], and the
    current log-probs off the behaviour ones (as after an update)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N, K), generator=g)
    mask = torch.arange(T) < lengths.unsqueeze(-1)
    old = (-torch.rand(N, K, T, generator=g, dtype=torch.float64) * 3) * mask
    logp = (old + 0.3 * torch.randn(N, K, T, generator=g, dtype=torch.float64)) * mask
    scores = torch.randint(0, 3, (N, K), generator=g).double() / 2
    logp_ref = (old + 0.2 * torch.randn(N, K, T, generator=g, dtype=torch.float64)) * mask if ref else None
    batch = Batch.sampled_group(old, scores.unsqueeze(-1) * mask, scores >= 1.0, scores=scores,
                                mask=mask, logp_ref=logp_ref)
    return batch, logp


def rows(batch, logp, perm, pad_noise=0.0):
    """The batch as a trainer holds it: one row per completion in `perm` order, group ids
    that are not 0..N-1, and (pad_noise) garbage at the padded steps, as a model's
    log-probs of padding tokens are."""
    flat = lambda x: x.reshape(N * K, T)[perm]  # noqa: E731
    m = flat(batch.mask)
    junk = pad_noise * (~m)
    ids = torch.arange(N).repeat_interleave(K) * 7 + 100
    return dict(logp=flat(logp) + junk, logp_old=flat(batch.logp_old) + junk, mask=m,
                scores=batch.scores.reshape(-1)[perm], group=ids[perm],
                slot=torch.arange(K).repeat(N)[perm],
                logp_ref=None if batch.logp_ref is None else flat(batch.logp_ref) + junk)


def test_the_fitting_zoo_is_the_group_methods():
    assert {"tpo", "grpo"} <= set(FITTING)
    assert not {"pg", "ppo", "dg", "ce"} & set(FITTING)


@pytest.mark.parametrize("name", FITTING)
def test_shuffled_rows_give_the_native_loss_bit_for_bit(name):
    algo = ALGORITHMS.get(name)()
    batch, logp = native()
    want = algo.loss(batch, logp).loss
    perm = torch.randperm(N * K, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(perm, torch.arange(N * K))
    r = rows(batch, logp, perm, pad_noise=-5.0)
    got, g = zoo_loss(algo, r["logp"], r["logp_old"], r["mask"], r["scores"], r["group"], r["slot"], K)
    assert got.loss.item() == want.item()
    assert torch.equal(g.batch.logp_old, batch.logp_old) and torch.equal(g.batch.scores, batch.scores)


def test_the_naive_reshape_of_shuffled_rows_gives_another_loss():
    batch, logp = native()
    perm = torch.randperm(N * K, generator=torch.Generator().manual_seed(1))
    r = rows(batch, logp, perm)
    naive = Batch.sampled_group(r["logp_old"].view(N, K, T), (r["scores"].view(N, K, 1) * r["mask"].view(N, K, T)),
                                r["scores"].view(N, K) >= 1, scores=r["scores"].view(N, K),
                                mask=r["mask"].view(N, K, T))
    wrong = TPO().loss(naive, r["logp"].view(N, K, T)).loss
    assert abs(wrong.item() - TPO().loss(batch, logp).loss.item()) > 1e-3


def test_gradients_reach_the_rows_they_came_from():
    batch, logp = native()
    perm = torch.randperm(N * K, generator=torch.Generator().manual_seed(2))
    r = rows(batch, logp, perm)
    leaf = r["logp"].clone().requires_grad_()
    zoo_loss(TPO(), leaf, r["logp_old"], r["mask"], r["scores"], r["group"], r["slot"], K)[0].loss.backward()
    ref = logp.clone().requires_grad_()
    TPO().loss(batch, ref).loss.backward()
    # padded steps are not the completion's: no gradient reaches them
    assert torch.equal(leaf.grad, (ref.grad * batch.mask).reshape(N * K, T)[perm])


def test_micro_batches_of_whole_groups_sum_to_the_full_batch_loss():
    """Each micro-batch's loss divided by their number (TRL's gradient accumulation)."""
    batch, logp = native()
    perm = torch.randperm(N * K, generator=torch.Generator().manual_seed(3))
    r = rows(batch, logp, perm)
    leaf = r["logp"].clone().requires_grad_()
    full = zoo_loss(TPO(), leaf, r["logp_old"], r["mask"], r["scores"], r["group"], r["slot"], K)[0].loss
    (g_full,) = torch.autograd.grad(full, leaf)
    total, parts = 0.0, [r["group"] == i * 7 + 100 for i in range(N)]  # one group each
    for part in parts:
        out = zoo_loss(TPO(), leaf[part], r["logp_old"][part], r["mask"][part], r["scores"][part],
                       r["group"][part], r["slot"][part], K)[0].loss
        total = total + out / len(parts)
    (g_sum,) = torch.autograd.grad(total, leaf)
    assert torch.allclose(total, full, rtol=0, atol=1e-12)
    assert torch.allclose(g_sum, g_full, rtol=0, atol=1e-12)


def test_the_reference_kl_is_the_harness_term():
    batch, logp = native(ref=True)
    perm = torch.randperm(N * K, generator=torch.Generator().manual_seed(4))
    r = rows(batch, logp, perm, pad_noise=3.0)
    got = zoo_loss(GRPO(), r["logp"], r["logp_old"], r["mask"], r["scores"], r["group"], r["slot"], K,
                   logp_ref=r["logp_ref"], kl_coef=0.25)[0]
    kl = reference_kl(batch, logp)
    assert kl.item() > 1e-3
    assert got.loss.item() == (GRPO().loss(batch, logp).loss + 0.25 * kl).item()
    assert got.metrics["kl_ref"].item() == kl.item()
    with pytest.raises(ValueError, match="needs the reference"):
        zoo_loss(GRPO(), r["logp"], r["logp_old"], r["mask"], r["scores"], r["group"], r["slot"], K, kl_coef=0.1)


def test_partial_groups_are_refused():
    batch, logp = native()
    r = rows(batch, logp, torch.arange(N * K))
    keep = torch.arange(N * K) != 5  # one completion of the second group gone
    with pytest.raises(PartialGroups, match=r"partial groups.*group 107: 3 rows; expected 4"):
        to_batch(*(r[k][keep] for k in ("logp", "logp_old", "mask", "scores", "group", "slot")), K)
    slot = r["slot"].clone()
    slot[1] = 0  # two slot-0 rows in the first group
    with pytest.raises(PartialGroups, match="slots inside a group must be 0..3"):
        regroup(r["group"], slot, K)
    with pytest.raises(PartialGroups, match="expected 2 each"):
        regroup(r["group"], r["slot"], 2)


@pytest.mark.parametrize("name,why", [("pg", "consumes 'sample'"), ("ppo", "consumes 'sample'"),
                                      ("dg", "consumes 'sample'"), ("ce", "consumes 'label'")])
def test_algorithms_a_trainer_cannot_feed_are_refused(name, why):
    with pytest.raises(ValueError, match=why):
        check_fits(ALGORITHMS.get(name)())


def test_token_level_and_dynamic_sampling_are_refused():
    with pytest.raises(ValueError, match="token-level groups"):
        check_fits(GRPO(level="token"))
    with pytest.raises(ValueError, match="dynamic_sampling"):
        check_fits(ALGORITHMS.get("clipped")(dynamic_sampling=2))


def _padding(r: dict, padded: bool) -> dict:
    """The rows with NaN at their padded steps (a model's log-probs of padding tokens may
    be anything), or, not `padded`, every step real."""
    if not padded:
        return {**r, "mask": torch.ones_like(r["mask"])}
    nan = lambda x: x.masked_fill(~r["mask"], float("nan"))  # noqa: E731
    return {**r, **{k: nan(r[k]) for k in ("logp", "logp_old", "logp_ref")}}


@pytest.mark.parametrize("name", ["tpo", "grpo"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("key,bad", [("scores", float("nan")), ("scores", float("inf")),
                                     ("logp", float("nan")), ("logp_old", float("nan")),
                                     ("logp_old", float("-inf")), ("logp_ref", float("nan"))])
def test_a_non_finite_input_is_refused_naming_it(name, padded, key, bad):
    """A NaN or infinite score, or log-prob at a real token, would make the loss and every
    gradient NaN: refused, naming that input (padded or not). Junk at padded steps is
    the trainer's padding, not an error."""
    batch, logp = native(ref=True)
    r = _padding(rows(batch, logp, torch.arange(N * K)), padded)
    assert bool((~r["mask"]).any()) == padded
    kw = dict(logp_ref=r["logp_ref"], kl_coef=0.1)
    algo = ALGORITHMS.get(name)()
    order = ("logp", "logp_old", "mask", "scores", "group", "slot")
    out, _ = zoo_loss(algo, *(r[k] for k in order), K, **kw)
    assert torch.isfinite(out.loss)
    r = {**r, key: r[key].clone()}
    if key == "scores":
        r[key][6] = bad
    else:
        r[key][6, 0] = bad  # the first token: real in every row
    with pytest.raises(ValueError, match=rf"^{key} holds {bad} at row 6"):
        zoo_loss(algo, *(r[k] for k in order), K, **{**kw, "logp_ref": r["logp_ref"]})
