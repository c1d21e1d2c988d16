"""tpo-bench's Hydra sweeper; Hydra only loads plugins from the hydra_plugins namespace."""
