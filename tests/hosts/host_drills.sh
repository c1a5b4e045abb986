#!/usr/bin/env bash
# Failure drills across test hosts (test_hosts.sh; issue 18), each done to a running job from
# outside and checked with a deadline, so that a hang fails the drill instead of blocking CTest:
#
#   host_drills.sh link PROGRAM      3 hosts, multi_worker_failure_test `steps`; h1's link is cut
#                                    after step 3: ranks 0 and 2 must report an error naming rank 1
#                                    and host h1 within the 5 s collective timeout + 5 s; the link
#                                    comes back, mpirun ends, and no process is left on any host
#   host_drills.sh sigterm PROGRAM   3 hosts; SIGTERM to the program on every host at once (a
#                                    cluster shutting down): every rank stops after the same step,
#                                    saves it, exits 0; the checkpoint exists
#   host_drills.sh slow TRAIN [RUN]  2 hosts, h1's link slowed (netem delay 20 ms where the kernel
#                                    has sch_netem, else a 20 Mbit/s token bucket): chorus-run
#                                    --hostfile trains the seed CNN with chorus-train across both;
#                                    it must finish, and its step time is printed beside the same
#                                    job's on a plain link
#
# Exit 0 when the drill holds, 1 with the reason when not, 77 (skip) when the hosts are not up.
set -uo pipefail

readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HOSTS=$HERE/test_hosts.sh
mode=${1:?usage: host_drills.sh link|sigterm PROGRAM | slow CHORUS_TRAIN [CHORUS_RUN]}
program=${2:?the drill program}

"$HOSTS" require true || exit $?
work=$(mktemp -d "${TMPDIR:-/tmp}/chorus-host-drill-XXXXXX")
job=""
cleanup() {
  [[ -n $job ]] && kill -9 "$job" 2>/dev/null
  "$HOSTS" link h1 up 2>/dev/null
  "$HOSTS" slow h1 off 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "host_drills.sh $mode: FAILED: $*"
  echo "---- job output ----"
  cat "$work/out" 2>/dev/null | tail -60
  exit 1
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Starts PROGRAM steps across N hosts in the background (job: its pid; output in $work/out).
start_steps() {
  local n=$1 steps=$2
  "$HOSTS" mpirun "$n" --allow-run-as-root --enable-recovery -np "$n" "$program" steps "$work" "$steps" \
    >"$work/out" 2>&1 &
  job=$!
  local t0
  t0=$(now)
  until [[ -e $work/ready ]]; do
    kill -0 "$job" 2>/dev/null || fail "the job ended before step 3"
    (($(awk -v e="$(elapsed "$t0")" 'BEGIN { print (e > 60) }'))) && fail "no step 3 within 60 s"
    sleep 0.05
  done
}

# Waits up to $1 s for the job to end; its exit status in $rc.
wait_job() {
  local limit=$1 t0
  t0=$(now)
  while kill -0 "$job" 2>/dev/null; do
    if (($(awk -v e="$(elapsed "$t0")" -v l="$limit" 'BEGIN { print (e > l) }'))); then
      fail "mpirun did not end within $limit s (a hang)"
    fi
    sleep 0.1
  done
  wait "$job"
  rc=$?
  job=""
}

no_process_left() {
  local host pids try
  for host in "$@"; do
    for try in $(seq 40); do
      pids=$("$HOSTS" pids "$host")
      [[ -z $pids ]] && break
      sleep 0.05
    done
    [[ -z $pids ]] || fail "processes left on host $host: $(echo $pids)"
  done
}

case $mode in
  link)
    start_steps 3 100000
    cut=$(now)
    "$HOSTS" link h1 down
    for rank in 0 2; do
      until grep -q "^\[rank $rank\] caught" "$work/out"; do
        (($(awk -v e="$(elapsed "$cut")" 'BEGIN { print (e > 15) }'))) && fail "rank $rank reported nothing 15 s after the cut"
        sleep 0.1
      done
      line=$(grep "^\[rank $rank\] caught" "$work/out")
      [[ $line =~ after\ ([0-9.]+)\ s ]] || fail "rank $rank: no time in: $line"
      waited=${BASH_REMATCH[1]}
      [[ $line == *"rank 1"* || $line == *"rank(s) [1]"* ]] || fail "rank $rank does not name rank 1: $line"
      [[ $line == *h1* ]] || fail "rank $rank does not name host h1: $line"
      (($(awk -v w="$waited" 'BEGIN { print (w > 10) }'))) && fail "rank $rank needed $waited s (timeout 5 s)"
      echo "rank $rank: error after $waited s naming rank 1 on h1"
    done
    "$HOSTS" link h1 up
    wait_job 60
    no_process_left h0 h1 h2
    echo "host_drills.sh link: held (mpirun exit $rc)"
    ;;
  sigterm)
    start_steps 3 100000
    for host in h0 h1 h2; do
      for pid in $("$HOSTS" pids "$host"); do
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$(basename "$program" | cut -c1-15)" ]] && kill -TERM "$pid"
      done
    done
    wait_job 60
    ((rc == 0)) || fail "mpirun exited $rc, expected 0"
    n=$(grep -cE "^\[rank [0-9]\] stopping after step" "$work/out")
    ((n == 3)) || fail "$n of 3 ranks reported stopping"
    steps=$(grep -oE "^\[rank [0-9]\] stopping after step [0-9]+" "$work/out" | awk '{print $NF}' | sort -u)
    [[ $(wc -l <<<"$steps") == 1 ]] || fail "the ranks stopped after different steps: $(echo $steps)"
    ckpt=$(grep -oE "checkpoint [^ ]*ckpt-[0-9]+" "$work/out" | head -1 | cut -d' ' -f2)
    [[ -e $ckpt.index ]] || fail "the checkpoint '$ckpt' does not exist"
    no_process_left h0 h1 h2
    echo "host_drills.sh sigterm: held: every rank stopped after step $steps and saved $(basename "$ckpt")"
    ;;
  slow)
    chorus_run=${3:-$(dirname "$program")/chorus-run}
    printf 'h0 slots=1\nh1 slots=1  # the slowed one\n' >"$work/hostfile"
    train() {  # the seed CNN on 2 hosts, chorus-run on h0; chorus-train's output (one line per epoch)
      CHORUS_PROGRESS=epoch timeout 300 "$HOSTS" exec h0 "$chorus_run" --hostfile "$work/hostfile" \
        --rsh-agent "$HERE/rsh_agent.sh" --network-interface 10.231.0.0/24 --mca btl tcp,self \
        --collective-timeout 60 -- "$program" --strategy multi_worker --model cnn --epochs 1 --train 2560 \
        --test 256 --batch 64 >"$work/out" 2>&1
    }
    train || fail "the job on a plain link exited $?"
    plain=$(grep -m1 -oE '[0-9]+ms/step' "$work/out") || fail "no ms/step in chorus-train's output"
    how="delay 20 ms each way (netem)"
    if ! "$HOSTS" slow h1 delay 20 2>"$work/tc"; then
      how="20 Mbit/s each way (tbf; this kernel has no sch_netem: $(head -1 "$work/tc"))"
      "$HOSTS" slow h1 rate 20 || fail "cannot slow the link"
    fi
    t0=$(now)
    train || fail "the job on the slowed link exited $?"
    slow=$(grep -m1 -oE '[0-9]+ms/step' "$work/out") || fail "no ms/step in chorus-train's output"
    grep -q "held-out accuracy" "$work/out" || fail "chorus-train did not finish"
    echo "seed CNN, 2 hosts x 1 process, global batch 64: plain link $plain; slowed link, $how: $slow ($(elapsed "$t0") s in all)"
    no_process_left h0 h1
    echo "host_drills.sh slow: held"
    ;;
  *) echo "usage: host_drills.sh link|sigterm PROGRAM | slow CHORUS_TRAIN [CHORUS_RUN]" >&2; exit 2 ;;
esac
