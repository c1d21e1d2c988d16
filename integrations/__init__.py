"""The harness's losses inside other trainers (Hugging Face TRL, verl).

`integrations.adapter` turns the rows a trainer holds (per-token log-probs, old log-probs,
completion mask, raw scores, group id, slot) into the harness's `Batch` [N, K, T] and
hands it to a registered algorithm's own `loss`: no loss is written twice. The trainer
modules (`integrations.trl_trainer`, `integrations.trl_record`, `integrations.verl_plugin`)
import their trainer lazily; the adapter needs torch alone.
"""
if __name__ == "integrations":  # the top-level name: this module is tpo_bench.integrations
    import tpo_bench

    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there
