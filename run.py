"""modelxray command line: ``python run.py [group=option ...] [key=value ...] [-m]``.

Examples:
    python run.py                                         # embedded default, offline
    python run.py model=tiny_gpt2 dataset.max_tokens=2048
    python run.py -m model=tiny_gpt2 dataset.max_tokens=2048,4096
"""

import sys

import hydra
from omegaconf import DictConfig

from modelxray.cli import FAILED_JOBS, task


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return task(cfg)


if __name__ == "__main__":
    main()
    sys.exit(1 if FAILED_JOBS else 0)
