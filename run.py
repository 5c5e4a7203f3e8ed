"""modelxray command line: ``python run.py [group=option ...] [key=value ...] [-m]``.

Examples:
    python run.py                                         # embedded default, offline
    python run.py model=tiny_gpt2 dataset.max_tokens=2048
    python run.py model=tiny_gpt2 dataset.max_tokens=2048,4096 -m
"""

from modelxray.cli import run

if __name__ == "__main__":
    run()
