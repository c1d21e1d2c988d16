"""A TRL `GRPOTrainer` whose loss is a registered harness algorithm's own (TPO by default).

TRL's loss sees normalised advantages, shuffled rows and micro-batches; a group loss needs
the raw scores of all K completions of a prompt in one call. This subclass keeps, from
generation, each row's raw score (the reward functions' weighted sum, before TRL
normalises it), group id and slot; its loss regroups the rows (integrations.adapter) and
calls the algorithm's `loss`, divided by the gradient-accumulation steps in training as
TRL divides its own. With `beta` > 0 the penalty is the harness's KL to the reference
(contract.batch.reference_kl), added as the harness's runner adds it. TRL's `loss_type`,
`epsilon`, `scale_rewards` and `importance_sampling_level` belong to its own loss and do
not enter this one. The group size is TRL's `num_generations` and the epochs its
`num_iterations` (with gradient_accumulation_steps=1: refused otherwise), not the
algorithm's `k` and `epochs`. The token entropy is logged as TRL logs its own.
Refused: settings whose semantics a group loss cannot honour (`check_args`, each with its
reason); at run time, rows that are not whole groups or a completion without a score.
"""
from __future__ import annotations

import torch

from .adapter import check_fits, zoo_loss

try:
    from trl import GRPOTrainer
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"integrations.trl_trainer needs TRL ({e}); pip install 'tpo-bench[trl]'") from e

SCORES, GROUP, SLOT = "zoo_scores", "zoo_group", "zoo_slot"  # what generation adds to a row


def check_args(args) -> None:
    """Refuse (ValueError) a TRL configuration whose semantics a group loss cannot honour."""
    g = args.num_generations
    if (args.steps_per_generation or 1) != 1:
        raise ValueError(
            f"steps_per_generation={args.steps_per_generation}: TRL shuffles a generation batch's "
            "rows before splitting it into micro-batches, which splits groups across loss calls; "
            "set steps_per_generation=1 (each generation batch is one micro-batch; "
            "gradient_accumulation_steps may stay > 1, each micro-batch then generates its own)")
    if args.num_iterations > 1 and args.gradient_accumulation_steps > 1:
        raise ValueError(
            f"gradient_accumulation_steps={args.gradient_accumulation_steps} with "
            f"num_iterations={args.num_iterations}: TRL reuses each generated batch for "
            "num_iterations consecutive micro-steps, so the micro-batches of one optimizer step "
            "repeat one batch with no update between them (no epochs). Set "
            "gradient_accumulation_steps=1 (each optimizer step then trains on one batch, "
            "num_iterations steps in a row), or num_iterations=1")
    if args.per_device_train_batch_size % g:
        raise ValueError(
            f"per_device_train_batch_size={args.per_device_train_batch_size} is not a multiple of "
            f"num_generations={g}: a micro-batch must hold whole groups")
    if getattr(args, "use_vllm", False) and getattr(args, "vllm_importance_sampling_correction", False):
        raise ValueError("vllm_importance_sampling_correction=True reweights each token by a "
                         "vLLM/trainer probability ratio; the group loss has no such term. Set it "
                         "False (the loss then takes the trainer's own log-probs as the old ones)")
    if getattr(args, "off_policy_mask_threshold", None) is not None:
        raise ValueError("off_policy_mask_threshold drops sequences from the loss by their "
                         "divergence; a group loss over a group with rows dropped is another loss")
    if getattr(args, "top_entropy_quantile", 1.0) < 1.0:
        raise ValueError("top_entropy_quantile < 1 masks tokens inside a completion; a candidate's "
                         "log-prob is the sum over all its tokens")
    if getattr(args, "mask_truncated_completions", False):
        raise ValueError("mask_truncated_completions=True zeroes a truncated completion's mask, "
                         "which leaves it in its group with a log-prob of 0; score truncation in "
                         "the reward instead")
    if getattr(args, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        raise ValueError(f"multi_objective_aggregation={args.multi_objective_aggregation!r}: the "
                         "scores handed to the loss are the raw weighted sum of the reward "
                         "functions; the algorithm normalises them itself")


class ZooGRPOTrainer(GRPOTrainer):
    """GRPOTrainer(..., algorithm=TPO()) trains with the harness's algorithm's loss.

    `algorithm`: an instance of a registered harness algorithm that consumes sampled groups
    (tpo, grpo, gpg, lpo, cispo, clipped; default TPO()). `success_at`: the score from which
    a completion counts as fully correct (diagnostics only; default 1.0)."""

    def __init__(self, *args, algorithm=None, success_at: float = 1.0, **kwargs):
        if algorithm is None:
            from ..algorithms.tpo import TPO
            algorithm = TPO()
        check_fits(algorithm)
        conf = kwargs.get("args")
        if conf is not None:
            check_args(conf)  # before the model loads
        super().__init__(*args, **kwargs)
        check_args(self.args)  # the defaults TRL filled in
        self.algorithm, self.success_at = algorithm, success_at
        self._zoo_rewards = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._zoo_rewards = out  # [rows of every process, reward functions]
        return out

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        per_func, self._zoo_rewards = self._zoo_rewards, None
        unscored = torch.isnan(per_func).all(-1)
        if bool(unscored.any()):
            raise ValueError(f"{int(unscored.sum())} completions have no score (every reward "
                             "function returned None): a group loss needs all K scores")
        scores = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(-1)
        B = out["completion_ids"].shape[0]
        mode = "train" if self.model.training else "eval"
        k = self.num_generations if mode == "train" else self.num_generations_eval
        first = self.accelerator.process_index * B  # this process's rows in the gathered batch
        row = torch.arange(first, first + B, device=scores.device)
        out[SCORES] = scores[first:first + B]
        out[GROUP], out[SLOT] = row // k, row % k
        return out

    def _compute_loss(self, model, inputs):
        if any(inputs.get(key) is not None for key in ("pixel_values", "image_grid_thw")):
            raise ValueError("images: the group loss here is verified on text completions only")
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if inputs.get("tool_mask") is None else completion_mask * inputs["tool_mask"]
        logp, entropy, _ = self._get_per_token_logps_and_entropies(
            model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1),
            completion_ids.size(1), compute_entropy=True)
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        mode = "train" if self.model.training else "eval"
        k = self.num_generations if mode == "train" else self.num_generations_eval
        out, _ = zoo_loss(self.algorithm, logp, old, mask, inputs[SCORES], inputs[GROUP], inputs[SLOT], k,
                          logp_ref=inputs.get("ref_per_token_logps") if self.beta else None,
                          kl_coef=self.beta, success_at=self.success_at)
        with torch.no_grad():  # mean token entropy over every process's real tokens, as TRL logs it
            m = mask.to(entropy.dtype)
            total = self.accelerator.reduce(torch.stack([(entropy * m).sum(), m.sum()]), reduction="sum")
            self._metrics[mode]["entropy"].append(float(total[0] / total[1].clamp_min(1)))
        for name, value in out.metrics.items():
            value = float(value)
            if value == value:  # NaN: nothing selected (no success in the batch)
                self._metrics[mode][f"zoo/{name}"].append(value)
        return out.loss / (self.current_gradient_accumulation_steps if mode == "train" else 1.0)
