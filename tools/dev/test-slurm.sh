#!/usr/bin/env bash
# A real Slurm cluster on the test hosts of tools/dev/test-hosts.sh: munged and slurmctld in
# host 1, one slurmd per host (node tsh<I> at 10.231.0.I, 2 CPUs), one partition `test`.
# Debian's slurm-wlm and munge, nothing faked; every daemon runs inside a host namespace, so
# `test-hosts.sh down` ends them all.
#
#   tools/dev/test-slurm.sh up      start the cluster on the hosts that are up; waits until
#                                   every node is idle
#   tools/dev/test-slurm.sh down    stop the daemons (idempotent)
#   tools/dev/test-slurm.sh check   exit 0 if slurm-wlm and munge are installed, else say why
#
# Then, from inside a host (SLURM_CONF is the only setting a client needs):
#   tools/dev/test-hosts.sh exec 1 "SLURM_CONF=$TESSERA_TEST_HOSTS/slurm/slurm.conf sbatch -N 2 job.sh"
#
# State in $TESSERA_TEST_HOSTS/slurm (default /var/tmp/tessera-test-hosts/slurm): slurm.conf,
# cgroup.conf, the munge key and socket, logs (slurmctld.log, slurmd-tsh<I>.log), spool and
# controller state. RequeueExit=7,8: a job ended by `tessera launch` stopped (7, a preemption
# after its checkpoint) or giving up (8) is requeued and resumes from its checkpoint; bad
# config (3) and the other final codes are not. A requeued job waits Slurm's fixed ~2 minutes
# before it is eligible; `scontrol update JobId=J StartTime=now` skips that.
set -euo pipefail
state=${TESSERA_TEST_HOSTS:-/var/tmp/tessera-test-hosts}
slurm=$state/slurm
hosts_sh=$(dirname "$(readlink -f "$0")")/test-hosts.sh

die() { echo "test-slurm: $*" >&2; exit 1; }

check() {
  local missing=()
  for b in munged slurmctld slurmd sbatch srun scontrol sinfo; do
    command -v "$b" >/dev/null || missing+=("$b")
  done
  if (( ${#missing[@]} )); then
    echo "test-slurm: missing ${missing[*]} (Debian: apt-get install slurm-wlm munge)"
    return 1
  fi
  id munge >/dev/null 2>&1 || { echo "test-slurm: no munge user (install munge)"; return 1; }
}

in_host() { TESSERA_TEST_HOSTS=$state bash "$hosts_sh" exec "$@"; }

down() {
  [[ -d $slurm ]] || return 0
  for pid_file in "$slurm"/*.pid; do
    [[ -f $pid_file ]] && kill -9 "$(cat "$pid_file")" 2>/dev/null || true
  done
  rm -rf "$slurm"
}

up() {
  check >&2 || exit 1
  [[ -f $state/hostfile ]] || die "no test hosts: run tools/dev/test-hosts.sh up N first"
  local n
  n=$(grep -c . "$state/hostfile")
  down
  mkdir -p "$slurm/ctld"
  head -c 1024 /dev/urandom > "$slurm/munge.key"
  chown munge:munge "$slurm/munge.key"
  chmod 400 "$slurm/munge.key"
  {
    echo "ClusterName=tessera"
    echo "SlurmctldHost=tsh1(10.231.0.1)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$slurm/munge.sock"
    echo "CredType=cred/munge"
    # No cgroups: the hosts are namespaces of one machine, and nothing here limits a job.
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "StateSaveLocation=$slurm/ctld"
    echo "SlurmdSpoolDir=$slurm/spool-%n"
    echo "SlurmctldPidFile=$slurm/slurmctld.pid"
    echo "SlurmdPidFile=$slurm/slurmd-%n.pid"
    echo "SlurmctldLogFile=$slurm/slurmctld.log"
    echo "SlurmdLogFile=$slurm/slurmd-%n.log"
    echo "ReturnToService=2"
    echo "SlurmctldTimeout=10"
    echo "SlurmdTimeout=10"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "MinJobAge=600"
    echo "JobRequeue=1"
    echo "RequeueExit=7,8"
    for i in $(seq 1 "$n"); do
      echo "NodeName=tsh$i NodeAddr=10.231.0.$i CPUs=2 State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$slurm/slurm.conf"
  # slurmd loads a cgroup plugin whatever the task plugin; inside a namespace /sys/fs/cgroup
  # is empty, so it gets a tmpfs of its own (in the host's private mount namespace).
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\n' > "$slurm/cgroup.conf"
  local env="SLURM_CONF=$slurm/slurm.conf"
  in_host 1 "munged --force --key-file=$slurm/munge.key --socket=$slurm/munge.sock \
    --pid-file=$slurm/munged.pid --log-file=$slurm/munged.log --seed-file=$slurm/munged.seed"
  in_host 1 "$env slurmctld -i"
  for i in $(seq 1 "$n"); do
    in_host "$i" "mount -t tmpfs cgroup /sys/fs/cgroup && $env slurmd -N tsh$i"
  done
  for _ in $(seq 1 100); do
    if in_host 1 "$env sinfo -h -o '%t %D'" 2>/dev/null | grep -qx "idle $n"; then
      echo "test-slurm: $n node(s) idle, SLURM_CONF=$slurm/slurm.conf"
      return 0
    fi
    sleep 0.2
  done
  in_host 1 "$env sinfo" || true
  tail -5 "$slurm/slurmctld.log" >&2 || true
  die "the nodes did not come up within 20 s (logs in $slurm)"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  check) check ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
