"""`python -m bench [overrides] [-m]`: one run per Hydra job."""
import sys

import hydra
from omegaconf import DictConfig, OmegaConf


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig

    from bench.runner import ConfigError, build, run

    # Keys set on the command line (some tasks refuse an explicit algo.k).
    explicit = frozenset(o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task)
    try:
        spec = build(OmegaConf.to_container(cfg, resolve=True), explicit)
    except (ConfigError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    summary = run(spec)
    return summary.get("final", {}).get("error", float("nan"))


if __name__ == "__main__":
    main()
