#!/usr/bin/env bash
# Copied from the workplace's ../shared/slurm/stop_slurm.sh; used by tests/test_slurm.py and by hand.
# Stop only the daemons that start_slurm.sh started (pid files in
# $BASE/run/started/), newest first: slurmd, slurmctld, munged.
# Jobs still on the cluster are cancelled first (bounded wait).
set -uo pipefail
BASE="${SLURM_LOCAL_DIR:-/tmp/slurm_local}"
PIDS="$BASE/run/started"
log() { echo "[stop_slurm] $*" >&2; }

ours() {  # ours NAME -> print pid if the recorded pid is alive and is NAME
  local p; p="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 1
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && grep -qa "$1" "/proc/$p/cmdline" 2>/dev/null && echo "$p"
}

# Cancel leftover jobs so no slurmstepd/job processes outlive slurmd.
if ours slurmctld >/dev/null && ours slurmd >/dev/null; then
  jobs="$(timeout 10 squeue -h -o '%A' 2>/dev/null | tr '\n' ' ')"
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    timeout 10 scancel $jobs 2>/dev/null || true
    end=$(( $(date +%s) + 20 ))
    while [ -n "$(timeout 5 squeue -h -t R,CG,S -o '%A' 2>/dev/null)" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  fi
fi

rc=0
for name in slurmd slurmctld munged; do
  if p="$(ours "$name")"; then
    log "stopping $name (pid $p)"
    kill -TERM "$p" 2>/dev/null || true
    end=$(( $(date +%s) + 20 ))
    while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 0.5; done
    if kill -0 "$p" 2>/dev/null; then
      log "$name (pid $p) ignored SIGTERM; sending SIGKILL"; kill -KILL "$p" 2>/dev/null || rc=1
    fi
  else
    log "$name: not started by start_slurm.sh or not running"
  fi
  rm -f "$PIDS/$name.pid"
done
exit $rc
