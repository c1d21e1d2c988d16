"""TPO (and GRPO) inside TRL's GRPOTrainer (integrations.trl_trainer) on a tiny causal LM
built in code, on the CPU, with a verifiable reward from the harness's own scorer (GSM8K's
final-number rule, tasks/_problems.score): at each of the first optimizer steps the loss
TRL returns and the gradients it accumulates equal a plain forward plus the harness's
loss on the same rows regrouped by hand (gradient accumulation 2, rows shuffled by TRL),
and on TRL's own per-token log-probs the loss is the harness's bit for bit;
the settings a group loss cannot honour are refused; the recorder writes run directories
that collect and plot read beside the harness's runs.

Needs TRL (the `trl` extra): skipped, with this reason, where it is not installed. TRL is
imported by the `lib` fixture (tests/trl_support.py), not at collection."""
import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from tpo_bench.algorithms.grpo import GRPO
from tpo_bench.algorithms.tpo import TPO

if importlib.util.find_spec("trl") is None or importlib.util.find_spec("transformers") is None:
    pytest.skip("TRL is not installed: pip install -e '.[trl]' runs these tests", allow_module_level=True)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def lib():
    import trl_support

    return trl_support


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,beta,kw", [
    (TPO(), 0.0, {}), (TPO(), 0.1, {}), (GRPO(kl_coef=0.0), 0.0, {}),
    # the second step reuses the first step's batch after an update: q stays the target of
    # the old log-probs TRL kept (TPO's epochs)
    (TPO(), 0.0, dict(gradient_accumulation_steps=1, num_iterations=2))])
def test_trl_steps_equal_a_plain_forward_and_the_harness_loss(lib, tmp_path, algorithm, beta, kw):
    t = lib.train(tmp_path, algorithm, beta=beta, **kw)
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
            key = (rows["zoo_group"] * lib.G + rows["zoo_slot"]).tolist()
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
    # TRL reuses each generated batch for num_iterations consecutive micro-steps, so with
    # accumulation the micro-batches of one optimizer step repeat a batch, no update between
    (dict(gradient_accumulation_steps=2, num_iterations=2), "gradient_accumulation_steps=2 with num_iterations=2"),
])
def test_settings_a_group_loss_cannot_honour_are_refused(lib, tmp_path, setting, message):
    kw = dict(output_dir=str(tmp_path), num_generations=lib.G, per_device_train_batch_size=2 * lib.G,
              steps_per_generation=1, report_to="none", use_cpu=True)
    kw.update(setting)
    with pytest.raises(ValueError, match=message):
        lib.check_args(lib.trl.GRPOConfig(**kw))


def test_a_micro_batch_of_part_groups_is_refused(lib, tmp_path):
    """On one process TRL's own check (generation batch a multiple of num_generations)
    already implies it; on several, a process's share of the generation batch is its
    micro-batch (2 processes x 2 rows, groups of 4: TRL accepts, the group loss cannot)."""
    args = lib.trl.GRPOConfig(output_dir=str(tmp_path), num_generations=lib.G, per_device_train_batch_size=2 * lib.G,
                          steps_per_generation=1, report_to="none", use_cpu=True)
    lib.check_args(args)
    args.per_device_train_batch_size = lib.G // 2
    with pytest.raises(ValueError, match="not a multiple of num_generations=4: a micro-batch must hold whole groups"):
        lib.check_args(args)


def test_vllm_importance_sampling_is_refused(lib, tmp_path):
    args = lib.trl.GRPOConfig(output_dir=str(tmp_path), num_generations=lib.G, per_device_train_batch_size=2 * lib.G,
                          steps_per_generation=1, report_to="none", use_cpu=True)
    args.use_vllm, args.vllm_importance_sampling_correction = True, True  # no vLLM here to start
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction"):
        lib.check_args(args)
    args.vllm_importance_sampling_correction = False
    lib.check_args(args)


def test_a_single_sample_algorithm_is_refused_before_the_model_loads(lib, tmp_path):
    from tpo_bench.algorithms.pg import PG
    with pytest.raises(ValueError, match="consumes 'sample'"):
        lib.ZooGRPOTrainer(model=None, reward_funcs=lib.harness_reward, args=lib.config(tmp_path), algorithm=PG())


@pytest.mark.slow
def test_recorded_trl_runs_are_collected_and_plotted_beside_harness_runs(lib, tmp_path, monkeypatch):
    from tpo_bench.analysis import collect, plot
    root = tmp_path / "outputs"
    shutil.copytree(FIXTURES / "legacy_runs", root)  # the harness's own runs
    for name, algo in (("tpo", TPO()), ("grpo", GRPO(kl_coef=0.0))):
        rec = lib.HarnessRecorder(root, "trl_sums", name, "tiny-llama-2x16", algorithm=algo,
                              task={"dataset": "sums_0_4"})
        lib.train(tmp_path / name, algo, recorder=rec, max_steps=3)
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


def test_the_recorder_refuses_a_row_less_than_every_step(lib, tmp_path):
    rec = lib.HarnessRecorder(tmp_path, "t", "tpo", "m", algorithm=TPO())
    with pytest.raises(ValueError, match="logging_steps=1"):
        rec.on_train_begin(lib.config(tmp_path, logging_steps=2), None, None)


@pytest.mark.slow
def test_a_run_with_num_iterations_is_recorded_at_every_step_with_what_trl_used(lib, tmp_path):
    """num_iterations=2: TRL generates at every other step; each step is still a row (the
    reused batch's reward beside it), the run completes, collect takes it, and the config
    records TRL's epochs, group size and optimizer, not the algorithm object's defaults."""
    from tpo_bench.analysis import collect
    from transformers.training_args import OptimizerNames
    root = tmp_path / "outputs"
    algo = TPO()
    assert (algo.k, algo.epochs) != (lib.G, 2)  # the defaults differ from what TRL runs
    rec = lib.HarnessRecorder(root, "trl_sums", "tpo", "tiny-llama-2x16", algorithm=algo)
    t = lib.train(tmp_path, algo, recorder=rec, max_steps=4, gradient_accumulation_steps=1, num_iterations=2)
    summary = json.loads((rec.path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rows"] == 4, summary
    df, skipped = collect.collect(root)
    assert not skipped, skipped
    assert sorted(df["step"]) == list(range(4))
    assert df["reward_mean"].notna().all() and df["loss"].notna().all()
    assert df["entropy"].between(0, math.log(len(lib.CHARS) + 2)).all(), df["entropy"]
    per_generation = t.args.per_device_train_batch_size  # one process, one micro-batch a step
    assert df.sort_values("step")["rollouts"].tolist() == [per_generation * g for g in (1, 1, 2, 2)]
    config = json.loads((rec.path / "config.json").read_text())
    assert (config["algo"]["epochs"], config["algo"]["k"]) == (t.args.num_iterations, t.args.num_generations)
    assert OptimizerNames(config["optim"]["name"]) == t.args.optim
    assert "." not in config["task"]["trl_lr_scheduler_type"]


@pytest.mark.slow
def test_the_zoo_grpo_is_trl_dr_grpo_up_to_a_constant_not_trl_grpo(lib, tmp_path):
    """On-policy, on the rows of a TRL step (TRL's own advantages, scale_rewards='group'),
    the zoo's grpo gradient points where TRL's loss_type='dr_grpo' does (a constant apart:
    sum over tokens / (rows x max_completion_length), std with Bessel's correction) and not
    where loss_type='grpo' does (each completion's tokens averaged: lengths weigh in), as
    docs/trl_verl.md says."""
    t = lib.train(tmp_path, GRPO(), reward=lib.digit_share, max_steps=1, gradient_accumulation_steps=1,
                  max_completion_length=8)
    rows = t.checks[0]["rows"][0]
    assert rows["completion_mask"].sum(-1).unique().numel() > 1  # lengths differ
    assert (rows["advantages"] != 0).any()
    cos = lib.gradient_cosines(t, rows, ("dr_grpo", "grpo"))
    assert cos["dr_grpo"] > 1 - 1e-6, cos
    assert cos["grpo"] < 0.999, cos
    page = " ".join((Path(__file__).parents[1] / "docs" / "trl_verl.md").read_text().split())
    assert 'the zoo\'s `grpo` is TRL\'s `loss_type="dr_grpo"`' in page
