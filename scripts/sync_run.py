"""Send a run folder to a tracking store: a run whose tracking server stopped answering (the run
went on locally and said so), or a run made with tracker=none.

    python scripts/sync_run.py outputs/2026-11-26/10-00-00                 # to the store it was logging to
    python scripts/sync_run.py outputs/2026-11-26/10-00-00 --uri http://mlflow.internal:5000

The run it began on the server is continued where it still exists, else a new run holds it; its
params, every analyzer's metrics and its files are logged as the run would have logged them."""

from __future__ import annotations

import argparse
import sys

from modelxray.app.sync import sync_run
from modelxray.core.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the run folder (holds analysis_results.json and results/)")
    parser.add_argument("--uri", help="the tracking store (default: the one the run was logging to)")
    parser.add_argument("--experiment", help="the MLflow experiment (default: the run's)")
    args = parser.parse_args(argv)
    try:
        print(f"modelxray: synced {sync_run(args.folder, args.uri, args.experiment)}")
    except ConfigError as exc:
        print(f"modelxray: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
