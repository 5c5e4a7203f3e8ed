#!/usr/bin/env bash
# A local MLflow tracking server: SQLite backend store and an artifact root in one folder, on
# loopback by default. Runs in the foreground (Ctrl-C stops it).
#
#   scripts/mlflow_server.sh                          # http://127.0.0.1:5000, data in ./mlflow_server
#   MLFLOW_DIR=/shared/mlflow PORT=5055 scripts/mlflow_server.sh
#   HOST=0.0.0.0 ALLOWED_HOSTS=myhost:5000 scripts/mlflow_server.sh   # reachable from compute nodes
#
# Then: python run.py -m ... tracker=mlflow_server tracker.uri=http://HOST:PORT
set -euo pipefail
MLFLOW_DIR="${MLFLOW_DIR:-./mlflow_server}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-5000}"
WORKERS="${WORKERS:-1}"
mkdir -p "$MLFLOW_DIR"
DIR="$(cd "$MLFLOW_DIR" && pwd)"
args=(--backend-store-uri "sqlite:///$DIR/mlflow.db?timeout=60" --artifacts-destination "$DIR/mlartifacts"
      --host "$HOST" --port "$PORT" --workers "$WORKERS")
if [[ -n "${ALLOWED_HOSTS:-}" ]]; then
  args+=(--allowed-hosts "$ALLOWED_HOSTS")
fi
echo "modelxray: MLflow server on http://$HOST:$PORT (store $DIR/mlflow.db, artifacts $DIR/mlartifacts)" >&2
exec mlflow server "${args[@]}"
