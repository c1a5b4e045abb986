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
#   host_drills.sh restart TRAIN [RUN]  3 hosts, chorus-run --max-restarts 2 --status-dir (shared)
#                                    around chorus-train --checkpoint-dir: the rank on h1 is killed
#                                    after the first epoch's checkpoint; chorus-run starts the job
#                                    again, it resumes and finishes, and its final checkpoint equals
#                                    an uninterrupted run's byte for byte
#   host_drills.sh lost-host TRAIN [RUN]  the same with h2's link cut for good after the first
#                                    epoch: the survivors time out, chorus-run ends the mpirun that
#                                    waits on h2's daemon (--failure-grace), finds h2 silent, and
#                                    restarts on h0 and h1 (--min-hosts 2), which finish the run
#   host_drills.sh torchrun TRAIN [RUN]  3 hosts, no mpirun: one chorus-run agent per host
#                                    (--nnodes 3 --node-rank I --rdzv-endpoint on h0,
#                                    GLOO_SOCKET_IFNAME=eth0) around chorus-train: on 2 hosts its
#                                    final checkpoint equals the same job's under mpirun byte for
#                                    byte; then, on 3, the worker on h1 is killed, and in a second job h1's link
#                                    is cut: the workers on h0 and h2 name rank 1 on h1 within 10 s
#                                    (collective timeout 5 s for the cut), every agent ends non-zero
#                                    and no process is left. Also on 2 hosts: chorus-train started by
#                                    hand with TF_CONFIG only (no launcher) reaches the same bytes
#   host_drills.sh torchrun-restart TRAIN [RUN]  3 hosts, no mpirun: an uninterrupted run of 3
#                                    agents; the same job with TF_CONFIG only reaches its bytes; then
#                                    agents with --max-restarts 2 whose worker on h1 is killed after
#                                    the first epoch's checkpoint: every agent restarts, the workers
#                                    resume, and the final checkpoint equals the uninterrupted run's
#                                    byte for byte
#   host_drills.sh torchrun-lost-host TRAIN [RUN]  3 hosts, no mpirun, elastic agents (--nnodes 2:3
#                                    --max-restarts 1): h2's link is cut for good after the first
#                                    epoch; the workers on h0 and h1 time out, their agents restart
#                                    without node 2 (2 of 3 nodes, renumbered), and the job resumes
#                                    from its checkpoint and finishes on h0 and h1
#
# Exit 0 when the drill holds, 1 with the reason when not, 77 (skip) when the hosts are not up.
set -uo pipefail

readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HOSTS=$HERE/test_hosts.sh
mode=${1:?usage: host_drills.sh link|sigterm PROGRAM | slow|restart|lost-host|torchrun|torchrun-restart|torchrun-lost-host CHORUS_TRAIN [CHORUS_RUN]}
program=${2:?the drill program}

"$HOSTS" require true || exit $?
work=$(mktemp -d "${TMPDIR:-/tmp}/chorus-host-drill-XXXXXX")
job=""
agent_pids=()
cleanup() {
  [[ -n $job ]] && kill -9 "$job" 2>/dev/null
  local p
  for p in "${agent_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  local h
  for h in h1 h2; do "$HOSTS" link $h up 2>/dev/null; done  # whichever link a failed drill left cut
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

kill_train_on() {  # kill_train_on HOST: SIGKILL to the chorus-train running on HOST
  local pid victim=""
  for pid in $("$HOSTS" pids "$1"); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == chorus-train ]] && victim=$pid
  done
  [[ -n $victim ]] || fail "no chorus-train on $1"
  kill -9 "$victim"
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
    "$HOSTS" link h1 up || fail "h1 not reachable again after its link came back"
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
  restart | lost-host)
    chorus_run=${3:-$(dirname "$program")/chorus-run}
    printf 'h0\nh1\nh2\n' >"$work/hostfile"
    train() {  # train DIR EXTRA_CHORUS_RUN_OPTIONS...: the MLP on 3 hosts, chorus-run on h0
      local dir=$1
      shift
      CHORUS_PROGRESS=none "$HOSTS" exec h0 "$chorus_run" --hostfile "$work/hostfile" \
        --rsh-agent "$HERE/rsh_agent.sh" --network-interface 10.231.0.0/24 --mca btl tcp,self \
        --status-dir "$work/status" "$@" -- "$program" --strategy multi_worker --model mlp --epochs 3 \
        --train 30000 --test 200 --batch 60 --quiet --checkpoint-dir "$dir"
    }
    wait_for_file() {  # wait_for_file PATH SECONDS
      local t0
      t0=$(now)
      until [[ -e $1 ]]; do
        kill -0 "$job" 2>/dev/null || fail "the job ended before $1 appeared"
        (($(awk -v e="$(elapsed "$t0")" -v l="$2" 'BEGIN { print (e > l) }'))) && fail "no $1 within $2 s"
        sleep 0.05
      done
    }
    if [[ $mode == restart ]]; then
      timeout 300 bash -c "$(declare -f train); HOSTS=$HOSTS HERE=$HERE work=$work chorus_run=$chorus_run \
        program=$program train $work/whole" >"$work/out" 2>&1 || fail "the uninterrupted run failed"
      train "$work/restarted" --max-restarts 2 >"$work/out" 2>&1 &
      job=$!
      wait_for_file "$work/restarted/ckpt-1.index" 120
      kill_train_on h1
      wait_job 240
      ((rc == 0)) || fail "the restarted job exited $rc"
      grep -q "restart 1 of 2" "$work/out" || fail "chorus-run did not restart the job"
      [[ -e $work/restarted/ckpt-3.index ]] || fail "no final checkpoint"
      compared=0
      for f in "$work"/whole/ckpt-3.*; do
        [[ -e $f ]] || continue
        cmp -s "$f" "$work/restarted/$(basename "$f")" || fail "$(basename "$f") differs from the uninterrupted run's"
        ((++compared))
      done
      ((compared >= 2)) || fail "the uninterrupted run left no final checkpoint to compare"
      no_process_left h0 h1 h2
      echo "host_drills.sh restart: held: rank on h1 killed after epoch 1, restarted, final checkpoint equal byte for byte"
    else
      train "$work/shrunk" --max-restarts 1 --min-hosts 2 --failure-grace 10 --collective-timeout 10 >"$work/out" 2>&1 &
      job=$!
      wait_for_file "$work/shrunk/ckpt-1.index" 120
      cut=$(now)
      "$HOSTS" link h2 down
      wait_job 240
      ((rc == 0)) || fail "the job exited $rc"
      grep -q "ending .*mpirun" "$work/out" || fail "chorus-run did not end the waiting mpirun"
      grep -q "h2: " "$work/out" || fail "the host check did not name h2"
      grep -q "starting on the 2 hosts that answer (h0:1,h1:1), 2 processes" "$work/out" ||
        fail "no restart on h0 and h1"
      [[ -e $work/shrunk/ckpt-3.index ]] || fail "no final checkpoint"
      took=$(elapsed "$cut")
      "$HOSTS" link h2 up || fail "h2 not reachable again after its link came back"
      no_process_left h0 h1
      echo "host_drills.sh lost-host: held: h2 lost after epoch 1, finished on h0 and h1 $took s after the cut"
    fi
    ;;
  torchrun | torchrun-restart | torchrun-lost-host)
    chorus_run=${3:-$(dirname "$program")/chorus-run}
    train=1800
    [[ $mode != torchrun ]] && train=9000  # long enough epochs to act in the second
    agents() {  # agents N DIR EPOCHS [CHORUS_RUN_OPTIONS...]: one agent on each of h0..h(N-1), in the background
      local n=$1 dir=$2 epochs=$3 i
      shift 3
      agent_pids=()
      rm -f "$work"/out.h*
      for ((i = 0; i < n; ++i)); do
        CHORUS_PROGRESS=none "$HOSTS" exec h$i "$chorus_run" --nnodes "$n" --nproc-per-node 1 --node-rank $i \
          --rdzv-endpoint 10.231.0.1:29500 --rdzv-timeout 60 -x GLOO_SOCKET_IFNAME=eth0 "$@" -- "$program" \
          --strategy multi_worker --model mlp --epochs "$epochs" --train "$train" --test 200 --batch 60 --quiet \
          --checkpoint-dir "$dir" >"$work/out.h$i" 2>&1 &
        agent_pids+=($!)
      done
    }
    tf_config_workers() {  # tf_config_workers N DIR EPOCHS: chorus-train on h0..h(N-1) with TF_CONFIG only
      local n=$1 dir=$2 epochs=$3 i cluster=""
      agent_pids=()
      rm -f "$work"/out.h*
      for ((i = 0; i < n; ++i)); do cluster+="${cluster:+,}\"10.231.0.$((i + 1)):29600\""; done
      for ((i = 0; i < n; ++i)); do
        CHORUS_PROGRESS=none GLOO_SOCKET_IFNAME=eth0 \
          TF_CONFIG="{\"cluster\": {\"worker\": [$cluster]}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
          "$HOSTS" exec h$i "$program" --strategy multi_worker --model mlp --epochs "$epochs" --train "$train" \
          --test 200 --batch 60 --quiet --checkpoint-dir "$dir" >"$work/out.h$i" 2>&1 &
        agent_pids+=($!)
      done
    }
    same_checkpoint() {  # same_checkpoint DIR_A DIR_B STEP WHAT: every file of ckpt-STEP byte for byte
      local f compared=0
      for f in "$1"/ckpt-"$3".*; do
        [[ -e $f ]] || continue
        cmp -s "$f" "$2/$(basename "$f")" || fail "$(basename "$f") of $4 differs"
        ((++compared))
      done
      ((compared >= 2)) || fail "no final checkpoint in $1 to compare with $4"
    }
    wait_agents() {  # wait_agents SECONDS: their exit statuses in $codes
      local limit=$1 t0 p
      t0=$(now)
      codes=""
      for p in "${agent_pids[@]}"; do
        while kill -0 "$p" 2>/dev/null; do
          (($(awk -v e="$(elapsed "$t0")" -v l="$limit" 'BEGIN { print (e > l) }'))) &&
            { cat "$work"/out.h* >"$work/out"; fail "the agents did not end within $limit s (a hang)"; }
          sleep 0.1
        done
        wait "$p"
        codes+="$? "
      done
      agent_pids=()
      cat "$work"/out.h* >"$work/out"
    }
    named_within() {  # named_within T0 SECONDS: the workers on h0 and h2 name rank 1 on h1 in time
      local t0=$1 limit=$2 h
      for h in h0 h2; do
        until grep -q "rank 1 (host h1" "$work/out.$h"; do
          (($(awk -v e="$(elapsed "$t0")" -v l="$limit" 'BEGIN { print (e > l) }'))) &&
            { cat "$work"/out.h* >"$work/out"; fail "the worker on $h did not name rank 1 on h1 within $limit s"; }
          sleep 0.1
        done
        echo "worker on $h: named rank 1 on h1 after $(elapsed "$t0") s"
      done
    }
    wait_for_ckpt() {
      local t0
      t0=$(now)
      until [[ -e $1 ]]; do
        (($(awk -v e="$(elapsed "$t0")" 'BEGIN { print (e > 120) }'))) &&
          { cat "$work"/out.h* >"$work/out"; fail "no $1 within 120 s"; }
        sleep 0.05
      done
    }
    if [[ $mode == torchrun-lost-host ]]; then
      agents 3 "$work/shrunk" 3 --nnodes 2:3 --max-restarts 1 --rdzv-last-call 2 --failure-grace 5 \
        --collective-timeout 10
      wait_for_ckpt "$work/shrunk/ckpt-1.index"
      cut=$(now)
      "$HOSTS" link h2 down
      wait_agents 240
      took=$(elapsed "$cut")
      [[ $codes == "0 0 "* ]] || fail "the agents on h0 and h1 exited $codes"
      [[ $codes != *" 0 " ]] || fail "the agent on h2 exited 0 though its host was cut off"
      grep -q "attempt 1 goes on with 2 of 3 nodes (without node(s) 2)" "$work/out.h0" ||
        fail "node 0 did not restart without node 2"
      grep -q "node 1 of 3: starting rank 1 of 2 (attempt 1" "$work/out.h1" || fail "node 1 was not renumbered"
      [[ -e $work/shrunk/ckpt-3.index ]] || fail "no final checkpoint"
      grep -q "Resumed from .*ckpt-1" "$work/out" || fail "the restarted workers did not resume from ckpt-1"
      "$HOSTS" link h2 up || fail "h2 not reachable again after its link came back"
      no_process_left h0 h1 h2
      echo "host_drills.sh torchrun-lost-host: held: h2 lost after epoch 1, finished on h0 and h1 $took s after" \
        "the cut (agents exited $codes)"
      exit 0
    fi
    if [[ $mode == torchrun-restart ]]; then
      agents 3 "$work/whole" 3
      wait_agents 300
      [[ $codes == "0 0 0 " ]] || fail "the uninterrupted run's agents exited $codes"
      tf_config_workers 3 "$work/tf_config3" 3
      wait_agents 300
      [[ $codes == "0 0 0 " ]] || fail "the TF_CONFIG workers on 3 hosts exited $codes"
      same_checkpoint "$work/whole" "$work/tf_config3" 3 "the TF_CONFIG job on 3 hosts"
      echo "3 hosts with TF_CONFIG only: final checkpoint equal to the agents' byte for byte"
      agents 3 "$work/restarted" 3 --max-restarts 2
      wait_for_ckpt "$work/restarted/ckpt-1.index"
      kill_train_on h1
      wait_agents 240
      [[ $codes == "0 0 0 " ]] || fail "the restarted job's agents exited $codes"
      grep -q "restart 1 of 2" "$work/out" || fail "the agents did not restart the job"
      same_checkpoint "$work/whole" "$work/restarted" 3 "the restarted job"
      no_process_left h0 h1 h2
      echo "host_drills.sh torchrun-restart: held: worker on h1 killed after epoch 1, every agent restarted," \
        "final checkpoint equal to the uninterrupted run's byte for byte"
      exit 0
    fi
    # 1. the same job under mpirun (chorus-run --hostfile on h0) and without it, on 2 hosts (with
    #    3, MPI and Gloo add the three workers' gradients in different orders: not bit for bit)
    printf 'h0\nh1\n' >"$work/hostfile"
    CHORUS_PROGRESS=none timeout 300 "$HOSTS" exec h0 "$chorus_run" --hostfile "$work/hostfile" \
      --rsh-agent "$HERE/rsh_agent.sh" --network-interface 10.231.0.0/24 --mca btl tcp,self -- "$program" \
      --strategy multi_worker --model mlp --epochs 2 --train 1800 --test 200 --batch 60 --quiet \
      --checkpoint-dir "$work/mpirun" >"$work/out" 2>&1 || fail "the job under mpirun failed"
    agents 2 "$work/torchrun" 2
    wait_agents 300
    [[ $codes == "0 0 " ]] || fail "the agents exited $codes"
    same_checkpoint "$work/mpirun" "$work/torchrun" 2 "the job without mpirun (torchrun variables)"
    echo "2 hosts without mpirun: final checkpoint equal to mpirun's byte for byte"
    tf_config_workers 2 "$work/tf_config" 2
    wait_agents 300
    [[ $codes == "0 0 " ]] || fail "the TF_CONFIG workers exited $codes"
    same_checkpoint "$work/mpirun" "$work/tf_config" 2 "the TF_CONFIG job"
    echo "2 hosts with TF_CONFIG only: final checkpoint equal to mpirun's byte for byte"
    # 2. the worker on h1 killed
    agents 3 "$work/killed" 1000
    wait_for_ckpt "$work/killed/ckpt-1.index"
    t0=$(now)
    kill_train_on h1
    named_within "$t0" 10
    wait_agents 60
    for c in $codes; do ((c != 0)) || fail "an agent exited 0 after the kill: $codes"; done
    no_process_left h0 h1 h2
    # 3. h1's link cut (found by the collective timeout: no connection closes)
    agents 3 "$work/cut" 1000 -x CHORUS_COLLECTIVE_TIMEOUT=5
    wait_for_ckpt "$work/cut/ckpt-1.index"
    t0=$(now)
    "$HOSTS" link h1 down
    named_within "$t0" 15
    "$HOSTS" link h1 up || fail "h1 not reachable again after its link came back"
    wait_agents 90
    for c in $codes; do ((c != 0)) || fail "an agent exited 0 after the cut: $codes"; done
    no_process_left h0 h1 h2
    echo "host_drills.sh torchrun: held (agents after the cut exited $codes)"
    ;;
  *) echo "usage: host_drills.sh link|sigterm PROGRAM | slow|restart|lost-host|torchrun CHORUS_TRAIN [CHORUS_RUN]" >&2; exit 2 ;;
esac
