#!/usr/bin/env bash
# Test hosts on one machine: N "hosts" as network namespaces on a private bridge, each with its
# own address, hostname (a UTS namespace) and local /tmp (its scratch directory, bind-mounted in
# a mount namespace: a Unix socket or file one host leaves in /tmp is not on the others), for
# multi-host runs without a cluster. Inside the hosts the names tsh<I> resolve to their
# addresses (an /etc/hosts of the set, bind-mounted there), as a cluster's names would. Everything else of the file system is shared. Needs root
# (CAP_NET_ADMIN), iproute2 and util-linux. Touches none of the machine's real interfaces: the
# bridge has no address and nothing is routed off it.
#
#   tools/dev/test-hosts.sh up N        create hosts 1..N (N <= 8), replacing any earlier set
#   tools/dev/test-hosts.sh down        remove them and their state (idempotent; also after a
#                                       failed test)
#   tools/dev/test-hosts.sh exec I CMD  run CMD (joined and run by sh, as ssh does) inside host I
#   tools/dev/test-hosts.sh check       exit 0 if hosts can be created here, else say why
#   tools/dev/test-hosts.sh lose H      kill every process of host H and cut its link (for good)
#   tools/dev/test-hosts.sh link H down|up           cut or restore host H's link
#   tools/dev/test-hosts.sh qdisc H SPEC...|clear    a tc qdisc on host H's link ("netem
#                                       delay 20ms loss 1%", "tbf rate 10mbit burst 32kbit
#                                       latency 400ms"), or remove it
# H: the index I, the name tsh<I> or the address 10.231.0.I (as a hostfile names it); these
# are the verbs `tessera chaos` calls as job.host_control.
#
# State: $TESSERA_TEST_HOSTS (default /var/tmp/tessera-test-hosts; not under /tmp, which each
# host replaces) holds `hostfile` (one line per host: "10.231.0.I slots=2"), `rsh` (the agent for
# mpirun, --mca plm_rsh_agent STATE/rsh: it runs Open MPI's daemon inside the target host, so
# nothing but the agent is special) and host<I>/ (that host's /tmp). Names: namespaces tsh<I>,
# bridge tshbr, veths tshv<I>. Inside each host the interface is eth0: give mpirun
# --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0.
# Link faults: `qdisc I netem delay 50ms loss 1%` (needs the kernel's sch_netem; `tbf rate
# 10mbit burst 32kbit latency 400ms` limits the rate where it is missing), `link I down`.
set -euo pipefail
prefix=tsh
subnet=10.231.0
bridge=${prefix}br
state=${TESSERA_TEST_HOSTS:-/var/tmp/tessera-test-hosts}
self=$(readlink -f "$0")

die() { echo "test-hosts: $*" >&2; exit 1; }

check() {
  [[ $(id -u) == 0 ]] || { echo "test-hosts: needs root (network namespaces)"; return 1; }
  command -v ip >/dev/null || { echo "test-hosts: needs iproute2 (the ip command)"; return 1; }
  command -v unshare >/dev/null || { echo "test-hosts: needs util-linux (unshare)"; return 1; }
  local probe=${prefix}probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "test-hosts: cannot create a network namespace here (no CAP_NET_ADMIN?)"
    return 1
  fi
  # Entering one (ip -n, ip netns exec) and giving a host its own /tmp need a mount namespace
  # whose / is a mount point: not so in a chroot.
  local ok=1
  ip -n "$probe" link set lo up 2>/dev/null || ok=0
  if [[ $ok == 1 ]]; then
    ip netns exec "$probe" unshare --uts --mount --propagation private /bin/true 2>/dev/null || ok=0
  fi
  ip netns del "$probe" 2>/dev/null || true
  if [[ $ok == 0 ]]; then
    # ip netns add left /run/netns bind-mounted onto itself; with no namespace in it, take that
    # away too, so a chroot can be removed afterwards.
    # (mountpoint(1) cannot tell: the bind mount is on the same device.)
    if [[ -z $(ip netns list 2>/dev/null) ]]; then umount /run/netns 2>/dev/null || true; fi
    echo "test-hosts: cannot enter a network and mount namespace here (a chroot, whose / is not a mount point?)"
    return 1
  fi
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  # A namespace outlives its name while a socket of it lingers (a connection whose peer's link
  # was cut retransmits its FIN for minutes): take our side of every veth away, which removes
  # the pair, so a new set never collides with an old one.
  for link in $(ip -o link show 2>/dev/null | grep -oE "^[0-9]+: ${prefix}v[0-9]+" | awk '{print $2}' || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

up() {
  local n=${1:-}
  [[ $n =~ ^[1-8]$ ]] || die "up: N must be 1..8, got '$n'"
  check >&2 || exit 1
  down
  mkdir -p "$state"
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  : > "$state/hostfile"
  cp /etc/hosts "$state/hosts"
  for i in $(seq 1 "$n"); do
    ip netns add "${prefix}$i"
    ip link add "${prefix}v$i" type veth peer name eth0 netns "${prefix}$i"
    ip link set "${prefix}v$i" master "$bridge" up
    ip -n "${prefix}$i" addr add "$subnet.$i/24" dev eth0
    ip -n "${prefix}$i" link set eth0 up
    ip -n "${prefix}$i" link set lo up
    mkdir -p "$state/host$i"
    chmod 1777 "$state/host$i"
    echo "$subnet.$i slots=2" >> "$state/hostfile"
    echo "$subnet.$i ${prefix}$i" >> "$state/hosts"
  done
  # Open MPI calls the agent as: rsh HOST ORTED-COMMAND...; HOST is the hostfile's address.
  cat > "$state/rsh" <<EOF
#!/bin/sh
host=\$1; shift
TESSERA_TEST_HOSTS='$state' exec "$self" exec "\${host##*.}" "\$@"
EOF
  chmod +x "$state/rsh"
  echo "test-hosts: $n host(s) up, state in $state"
}

# CMD inside host I's network namespace, a UTS namespace named after it and a mount namespace
# whose /tmp is the host's scratch directory and whose /etc/hosts names the set.
exec_in() {
  local i=${1:-}; shift || true
  [[ -n ${1:-} ]] || die "exec: no command"
  ip netns list | awk '{print $1}' | grep -qx "${prefix}$i" || die "exec: no host '$i'"
  [[ -d $state/host$i ]] || die "exec: no scratch directory $state/host$i"
  exec ip netns exec "${prefix}$i" unshare --uts --mount --propagation private /bin/sh -c \
    'hostname "$0"; mount --bind "$1" /tmp; mount --bind "$2" /etc/hosts; shift 2; exec /bin/sh -c "$*"' \
    "${prefix}$i" "$state/host$i" "$state/hosts" "$@"
}

# Host H's index from I, tsh<I> or 10.231.0.I.
index_of() {
  local h=${1:-}
  h=${h#"$subnet".}
  h=${h#"$prefix"}
  [[ $h =~ ^[1-8]$ ]] || die "no test host '$1' (expected I, ${prefix}I or $subnet.I)"
  ip netns list | awk '{print $1}' | grep -qx "${prefix}$h" || die "host '$1' is not up"
  echo "$h"
}

lose() {
  local i
  i=$(index_of "${1:-}")
  ip netns pids "${prefix}$i" | xargs -r kill -9 2>/dev/null || true
  ip -n "${prefix}$i" link set eth0 down
}

link() {
  local i
  i=$(index_of "${1:-}")
  [[ ${2:-} == up || ${2:-} == down ]] || die "link: expected up or down, got '${2:-}'"
  ip -n "${prefix}$i" link set eth0 "$2"
}

qdisc() {
  local i
  i=$(index_of "${1:-}"); shift
  [[ -n ${1:-} ]] || die "qdisc: expected a qdisc (netem delay 20ms, tbf rate ...) or clear"
  if [[ $1 == clear ]]; then
    ip netns exec "${prefix}$i" tc qdisc del dev eth0 root 2>/dev/null || true
  else
    # shellcheck disable=SC2068 — the qdisc's words, split on purpose
    ip netns exec "${prefix}$i" tc qdisc replace dev eth0 root $@
  fi
}

case ${1:-} in
  up) shift; up "$@" ;;
  lose) shift; lose "$@" ;;
  link) shift; link "$@" ;;
  qdisc) shift; qdisc "$@" ;;
  down) down ;;
  exec) shift; exec_in "$@" ;;
  check) check ;;
  *) sed -n '2,30p' "$self" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
