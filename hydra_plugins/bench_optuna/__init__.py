"""tpo-bench's optuna sweeper (`hydra/sweeper=optuna`); Hydra only loads plugins from the
hydra_plugins namespace. optuna itself is imported lazily: Hydra scans this package on
every `python -m bench`, and optuna is an optional extra (`pip install -e '.[tune]'`)."""
