"""`python -m bench [overrides] [-m]`: one run per Hydra job."""
import sys

import hydra
from omegaconf import DictConfig, OmegaConf


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from bench.runner import ConfigError, build, run

    try:
        spec = build(OmegaConf.to_container(cfg, resolve=True))
    except (ConfigError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    summary = run(spec)
    return summary.get("final", {}).get("error", float("nan"))


if __name__ == "__main__":
    main()
