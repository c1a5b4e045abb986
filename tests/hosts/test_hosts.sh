#!/usr/bin/env bash
# Test hosts: up to 4 "machines" on this one, each a Linux network namespace with its own address,
# interface and host name, joined by veth pairs on one bridge. Ranks started on them talk over TCP
# exactly as on separate machines (Open MPI's tcp BTL and out-of-band channel, chorus's peer
# monitor), and a test can cut or slow one host's link. Issue 18; docs/multi_host.md.
#
#   test_hosts.sh up N             make hosts h0..h(N-1) (N 2-4; stale ones from a killed run are
#                                  removed first); exit 0 also when this machine cannot (not root,
#                                  no iproute2/unshare, namespaces refused): it says why and
#                                  `require` then skips
#   test_hosts.sh down             remove them (and kill what still runs in them)
#   test_hosts.sh require CMD...   exit 77 (CTest's skip) with the reason when the hosts are not up,
#                                  else run CMD
#   test_hosts.sh mpirun N ARGS... mpirun started on h0 over h0..h(N-1), one slot each, TCP only:
#                                  `-H h0:1,...,h(N-1):1` and the MCA settings below, then ARGS
#   test_hosts.sh exec HOST CMD... run CMD on HOST (its namespace, its host name)
#   test_hosts.sh link HOST up|down        raise or cut HOST's link (its bridge-side veth); up
#                                          returns once every other host reaches HOST again
#   test_hosts.sh slow HOST delay MS       netem delay on HOST's link, both directions (kernels
#                                          without sch_netem refuse: "qdisc kind is unknown")
#   test_hosts.sh slow HOST rate MBIT      a token-bucket rate limit instead (sch_tbf)
#   test_hosts.sh slow HOST off            back to a plain link
#   test_hosts.sh pids HOST        the processes running on HOST (its namespace), one per line
#
# Layout: namespace chorus-hI, interface eth0 with 10.231.0.(I+1)/24 inside, veth chorus-vI on the
# bridge chorus-br in the root namespace (no address there: the root namespace is not a host).
# Host names come from a UTS namespace per command (unshare --uts), so gethostname(), Open MPI's
# node names and chorus's messages say h0, h1, ... Addresses are private and exist only inside
# these namespaces.
#
# How mpirun reaches the other hosts: Open MPI's rsh launcher with rsh_agent.sh beside this script
# as its agent (plm_rsh_agent), which runs the daemon's command on the named host instead of
# ssh'ing to it; mpirun itself runs on h0, so h0's own slot is local to it.
set -euo pipefail

readonly PREFIX=chorus
readonly BRIDGE=${PREFIX}-br
readonly SUBNET=10.231.0
readonly MAX_HOSTS=4
readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly STATE=${CHORUS_TEST_HOSTS_STATE:-/run/chorus-test-hosts}  # "N" when up, else the reason

die() {
  echo "test_hosts.sh: $*" >&2
  exit 2
}

host_index() {  # h3 -> 3
  [[ $1 =~ ^h([0-9])$ ]] && ((BASH_REMATCH[1] < MAX_HOSTS)) || die "no test host '$1' (h0..h$((MAX_HOSTS - 1)))"
  echo "${BASH_REMATCH[1]}"
}

cannot() {  # why these hosts cannot be made here, or nothing
  [[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)"; return; }
  command -v ip >/dev/null || { echo "needs iproute2 (ip)"; return; }
  command -v unshare >/dev/null || { echo "needs util-linux (unshare)"; return; }
  if ! ip netns add ${PREFIX}-probe 2>/dev/null; then
    echo "this machine refuses network namespaces (ip netns add failed)"
    return
  fi
  ip netns del ${PREFIX}-probe
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  local i
  for ((i = 0; i < MAX_HOSTS; ++i)); do ip link del ${PREFIX}-v$i 2>/dev/null || true; done
  ip link del $BRIDGE 2>/dev/null || true
  rm -f "$STATE"
}

# Makes the hosts; returns non-zero at the first command that fails, whose complaint is on stderr
# (set -e would not stop it: the caller tests the status).
make_hosts() {
  local n=$1 i
  ip link add $BRIDGE type bridge || return 1
  ip link set $BRIDGE up || return 1
  for ((i = 0; i < n; ++i)); do
    ip netns add ${PREFIX}-h$i || return 1
    ip link add ${PREFIX}-v$i type veth peer name eth0 netns ${PREFIX}-h$i || return 1
    ip link set ${PREFIX}-v$i master $BRIDGE up || return 1
    ip netns exec ${PREFIX}-h$i ip addr add $SUBNET.$((i + 1))/24 dev eth0 || return 1
    ip netns exec ${PREFIX}-h$i ip link set eth0 up || return 1
    ip netns exec ${PREFIX}-h$i ip link set lo up || return 1
  done
  # Every host reaches every other one before anything runs on them.
  for ((i = 1; i < n; ++i)); do reachable h0 $i || return 1; done
}

# Returns once FROM reaches host I (a TCP connect answered, refused counts: the port is closed but
# the host is there), or 1 after 5 s with what the connect said.
reachable() {
  local from=$1 i=$2 tries=0 said
  until said=$(ip netns exec ${PREFIX}-$from bash -c "exec 3<>/dev/tcp/$SUBNET.$((i + 1))/9" 2>&1) ||
    [[ $said == *refused* ]]; do
    ((++tries < 50)) || { echo "$from cannot reach h$i: $said" >&2; return 1; }
    sleep 0.1
  done
}

# Raises host I's link and returns when every other host reaches it again, so that the next
# drill starts on a network that answers (hosts_restart_3hosts once failed with "No route to host"
# right after the lost-host drill; not reproduced since, cause unknown). The neighbour (ARP)
# entries that failed while the link was down are flushed first, as a precaution: in a try here
# the kernel re-resolved them at once; the reach check is what guarantees.
link_up() {
  local i=$1 ns j
  ip link set ${PREFIX}-v"$i" up
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]$"); do
    ip netns exec "$ns" ip neigh flush all 2>/dev/null || true
  done
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]$"); do
    j=${ns#"${PREFIX}"-h}
    ((j == i)) || reachable "h$j" "$i" || return 1
  done
}

# Not being able to make the hosts is a skip, not a failure: the reason goes to the state file,
# where `require` and `mpirun` find it, and `up` exits 0.
no_hosts() {
  echo "test_hosts.sh: no test hosts: $1" >&2
  mkdir -p "$(dirname "$STATE")" 2>/dev/null && echo "$1" >"$STATE" 2>/dev/null || true
}

up() {
  local n=$1
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 2 && n <= MAX_HOSTS)) || die "up: N must be 2..$MAX_HOSTS, got '$n'"
  local why
  why=$(cannot)
  if [[ -n $why ]]; then
    no_hosts "$why"
    return 0
  fi
  down
  local err
  if ! err=$(make_hosts "$n" 2>&1 >/dev/null); then
    down
    no_hosts "this machine refused them (${err##*$'\n'})"
    return 0
  fi
  echo "$n" >"$STATE"
  echo "test_hosts.sh: hosts h0..h$((n - 1)) up on $SUBNET.0/24 (bridge $BRIDGE)"
}

hosts_up() {  # the number of hosts up, or exit 77 with the reason
  local state
  state=$(cat "$STATE" 2>/dev/null || echo "the hosts are not up (run: test_hosts.sh up N)")
  if [[ ! $state =~ ^[0-9]+$ ]] || ! ip netns list 2>/dev/null | grep -q "^${PREFIX}-h0\b"; then
    echo "skipped: no test hosts: $state" >&2
    exit 77
  fi
  echo "$state"
}

on_host() {  # on_host HOST CMD...: CMD in HOST's namespace with HOST as host name
  local host=$1
  shift
  local i
  i=$(host_index "$host")
  exec ip netns exec ${PREFIX}-h"$i" unshare --uts -- bash -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

run_mpirun() {
  local n=$1
  shift
  local up_count
  up_count=$(hosts_up)
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= up_count)) || die "mpirun: N must be 1..$up_count (hosts up), got '$n'"
  local spec="" i
  for ((i = 0; i < n; ++i)); do spec+="h$i:1,"; done
  on_host h0 mpirun \
    --mca plm_rsh_agent "$HERE/rsh_agent.sh" \
    --mca oob_tcp_if_include $SUBNET.0/24 \
    --mca btl tcp,self --mca btl_tcp_if_include $SUBNET.0/24 \
    -H "${spec%,}" "$@"
}

cmd=${1:-}
shift || true
case $cmd in
  up) up "${1:-3}" ;;
  down) down ;;
  require)
    hosts_up >/dev/null
    exec "$@"
    ;;
  mpirun) run_mpirun "$@" ;;
  exec)
    hosts_up >/dev/null
    on_host "$@"
    ;;
  link)
    i=$(host_index "${1:-}")
    [[ ${2:-} == up || ${2:-} == down ]] || die "link HOST up|down"
    if [[ $2 == up ]]; then link_up "$i"; else ip link set ${PREFIX}-v"$i" down; fi
    ;;
  slow)
    i=$(host_index "${1:-}")
    # Both directions: the bridge-side veth shapes what reaches the host, its eth0 what leaves it.
    for run in "tc qdisc" "ip netns exec ${PREFIX}-h$i tc qdisc"; do
      dev=${PREFIX}-v$i
      [[ $run == ip* ]] && dev=eth0
      $run del dev "$dev" root 2>/dev/null || true
      case ${2:-} in
        off) ;;
        delay) $run add dev "$dev" root netem delay "${3:?slow HOST delay MS}"ms ;;
        rate) $run add dev "$dev" root tbf rate "${3:?slow HOST rate MBIT}"mbit burst 32kbit latency 400ms ;;
        *) die "slow HOST off | delay MS | rate MBIT" ;;
      esac
    done
    ;;
  pids)
    i=$(host_index "${1:-}")
    ip netns pids ${PREFIX}-h"$i"
    ;;
  *) die "usage: test_hosts.sh up N | down | require CMD... | mpirun N ARGS... | exec HOST CMD... | link HOST up|down | slow HOST off|delay MS|rate MBIT | pids HOST" ;;
esac
