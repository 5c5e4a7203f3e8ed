#!/usr/bin/env bash
# Copied from the workplace's ../shared/slurm/start_slurm.sh; used by tests/test_slurm.py and by hand.
# Start a single-node SLURM cluster on loopback (munged + slurmctld + slurmd),
# installing Debian's packages first if missing. Idempotent: daemons already
# running are left alone. Only daemons started here get a pid file under
# $BASE/run/started/, which stop_slurm.sh uses. Needs root. No prompts.
#
# Env knobs: SLURM_LOCAL_DIR (default /tmp/slurm_local), SLURM_LOCAL_PARTITION
# (default debug), SLURM_LOCAL_CPUS (default nproc; may exceed it),
# SLURM_LOCAL_TIMEOUT (seconds to wait for the node, default 60),
# SLURM_LOCAL_NODE (default `hostname -s`), SLURM_LOCAL_KEEP_STATE=1 (recover
# jobs/node state saved by an earlier slurmctld instead of starting clean).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

BASE="${SLURM_LOCAL_DIR:-/tmp/slurm_local}"
PARTITION="${SLURM_LOCAL_PARTITION:-debug}"
WAIT_S="${SLURM_LOCAL_TIMEOUT:-60}"
HOST="$(hostname -s)"   # slurmctld only runs where SlurmctldHost == this
NODE="${SLURM_LOCAL_NODE:-$HOST}"
CONF=/etc/slurm/slurm.conf
MARK="# managed by start_slurm.sh"
log() { echo "[start_slurm] $*" >&2; }
die() { log "ERROR: $*"; for f in "$BASE"/log/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 20 "$f" >&2; }; done; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"

# ---- 1. install (only if missing) -----------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurmctld slurmd slurm-client munge"
  APT_OPTS=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=120
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  timeout 300 apt-get update -q >/dev/null || die "apt-get update failed"
  timeout 600 apt-get install "${APT_OPTS[@]}" slurmctld slurmd slurm-client munge >/dev/null \
    || die "apt-get install failed"
fi

# ---- 2. dirs, munge key, slurm.conf ---------------------------------------
mkdir -p "$BASE"/{state,spool,log,run/started,bin}
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0755 /run/munge; chmod 0700 /etc/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key

NCPU="${SLURM_LOCAL_CPUS:-$(nproc)}"
MEM_MB="$(awk '/^MemTotal:/ {printf "%d", $2/1024*0.9}' /proc/meminfo)"
mkdir -p /etc/slurm
if [ -f "$CONF" ] && ! head -n1 "$CONF" | grep -qF "$MARK"; then
  log "moving foreign $CONF to $CONF.bak"; mv "$CONF" "$CONF.bak"
fi
NEWCONF="$(cat <<EOF
$MARK
ClusterName=localcluster
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=3600
KillWait=5
Waittime=0
NodeName=${NODE} NodeAddr=127.0.0.1 NodeHostname=${HOST} CPUs=${NCPU} RealMemory=${MEM_MB} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE OverSubscribe=NO State=UP
EOF
)"
if [ "$(cat "$CONF" 2>/dev/null)" != "$NEWCONF" ]; then
  printf '%s\n' "$NEWCONF" > "$CONF"; CONF_CHANGED=1
else
  CONF_CHANGED=0
fi

# sacct stand-in: without accounting the real sacct fails and submitit then
# never notices jobs that die without a result file (scancel, timeout, OOM).
cat > "$BASE/bin/sacct" <<'EOF'
#!/usr/bin/env bash
# Answers `sacct -o JobID,State,NodeList --parsable2 -j ID...` (as submitit
# calls it) from slurmctld memory via squeue; jobs stay there MinJobAge s.
ids=()
while [ $# -gt 0 ]; do
  case "$1" in
    -j|--jobs) ids+=("$2"); shift 2 ;;
    --jobs=*)  ids+=("${1#--jobs=}"); shift ;;
    -j*)       ids+=("${1#-j}"); shift ;;
    *) shift ;;
  esac
done
echo "JobID|State|NodeList"
for id in "${ids[@]}"; do squeue -h -t all -j "$id" -o '%i|%T|%N' 2>/dev/null || true; done
exit 0
EOF
chmod 0755 "$BASE/bin/sacct"

# ---- 3. start daemons (skip those already running) -------------------------
alive() {  # alive PIDFILE NAME -> pid is running and is NAME
  local p; p="$(cat "$1" 2>/dev/null)" || return 1
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && grep -qa "$2" "/proc/$p/cmdline" 2>/dev/null
}
wait_for() {  # wait_for SECONDS CMD... -> retry CMD until it succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.5; done
}

if timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; then
  log "munged already answering"
else
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  wait_for 15 bash -c 'munge -n | unmunge' || die "munged did not come up"
  cp /run/munge/munged.pid "$BASE/run/started/munged.pid"
fi

if alive "$BASE/run/slurmctld.pid" slurmctld; then
  log "slurmctld already running"
  [ "$CONF_CHANGED" = 1 ] && { log "config changed: scontrol reconfigure"; scontrol reconfigure || true; }
else
  log "starting slurmctld"
  if [ "${SLURM_LOCAL_KEEP_STATE:-0}" = 1 ]; then /usr/sbin/slurmctld; else /usr/sbin/slurmctld -c; fi
  wait_for 30 alive "$BASE/run/slurmctld.pid" slurmctld || die "slurmctld did not start"
  cp "$BASE/run/slurmctld.pid" "$BASE/run/started/slurmctld.pid"
fi
wait_for 30 scontrol ping || die "slurmctld not answering"

if alive "$BASE/run/slurmd.pid" slurmd; then
  log "slurmd already running"
else
  log "starting slurmd"
  /usr/sbin/slurmd -N "$NODE"
  wait_for 30 alive "$BASE/run/slurmd.pid" slurmd || die "slurmd did not start"
  cp "$BASE/run/slurmd.pid" "$BASE/run/started/slurmd.pid"
fi

# ---- 4. wait until the node is usable --------------------------------------
end=$(( $(date +%s) + WAIT_S )); resumed=0
while :; do
  st="$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null || true)"
  case "$st" in
    idle|mixed|allocated|completing) break ;;
    *drain*|down*|*fail*|inval*)
      if [ "$resumed" = 0 ]; then
        log "node state '$st': resuming"; scontrol update NodeName="$NODE" State=RESUME || true; resumed=1
      fi ;;
  esac
  [ "$(date +%s)" -ge "$end" ] && die "node $NODE not ready after ${WAIT_S}s (state '$st')"
  sleep 1
done
log "node $NODE is $st; partition $PARTITION"
timeout 60 srun -p "$PARTITION" -N1 -n1 -t 1 true || die "smoke test 'srun true' failed"
log "ready. For submitit status checks: export PATH=$BASE/bin:\$PATH"
