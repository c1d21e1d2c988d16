"""Tuning reports (hydra/sweeper=optuna): each study's history and parameter importance
(report), and the tuned algorithms beside the untuned ones (tuned)."""
