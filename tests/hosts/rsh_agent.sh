#!/usr/bin/env bash
# Open MPI's remote-shell agent for the test hosts (test_hosts.sh; plm_rsh_agent): where ssh would
# connect to HOST and hand the command to its shell, this runs the command in HOST's network
# namespace, under HOST as host name.
#   rsh_agent.sh HOST WORD...   (Open MPI passes the remote command as words for a shell)
# Like ssh, it first needs a way to HOST from where it runs: a TCP connection attempt to HOST's
# address must be answered (refused is an answer) within 3 s, else it fails as ssh would (exit 255)
# — so a cut link or a call from outside the test hosts fails here, as on real machines.
host=$1
shift
if [[ ! $host =~ ^h([0-9])$ ]]; then
  echo "rsh_agent.sh: ssh: Could not resolve hostname $host: Name or service not known" >&2
  exit 255
fi
address=10.231.0.$((BASH_REMATCH[1] + 1))
said=$(timeout 3 bash -c "exec 3<>/dev/tcp/$address/22" 2>&1)
rc=$?
if ((rc != 0)) && [[ $said != *refused* ]]; then
  ((rc == 124)) && said="Connection timed out" || said=${said##*: }
  echo "rsh_agent.sh: ssh: connect to host $host ($address) port 22: $said" >&2
  exit 255
fi
exec ip netns exec "chorus-$host" unshare --uts -- sh -c 'hostname "$0" && exec sh -c "$*"' "$host" "$@"
