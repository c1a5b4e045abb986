# Runs multi_worker_failure_test under mpirun and checks what the job did (CTest: cmake -P).
#   -DMPIEXEC=mpirun -DFLAGS="--oversubscribe;..." -DNP=2 -DPROGRAM=... -DMODE=kill|sigterm
# Fails (FATAL_ERROR) when the expected output is missing, the exit status is wrong, or a run
# outlives its deadline (execute_process kills it: a hang fails the test instead of blocking CTest).
#
# kill: two runs.
#   1. plain mpirun: Open MPI ends the whole job as soon as rank 1 dies; mpirun must exit non-zero,
#      within the deadline.
#   2. mpirun --enable-recovery: Open MPI lets the survivors run on, so they show what chorus does:
#      each must print "caught DeadlineExceededError|UnavailableError|AbortedError after T s: ..."
#      naming rank 1, with T below the strategy's 5 s timeout + 5 s of slack.
#   3. the same command again (mode resume): every rank must resume from the checkpoint of step 3
#      (the last step all workers completed) and finish, exit 0.
# sigterm: mpirun must exit 0, every rank must print that all ranks agree on the stop step and name
# the checkpoint of that step, whose index must exist.
# DIR: the checkpoint directory (emptied first).
# Across test hosts (tests/hosts, issue 18): MPIEXEC is tests/hosts/test_hosts.sh with FLAGS
# "mpirun;N;...", -DLOST_HOST=h1 also requires the survivors' errors to name rank 1's host, and
# -DHOSTS=h0;h1;... requires that no process is left on any of those hosts after each run.
foreach(v MPIEXEC NP PROGRAM MODE DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_multi_worker_failure.cmake: -D${v}=... is required")
  endif()
endforeach()
set(deadline 60)

file(REMOVE_RECURSE "${DIR}")

function(run_job out_var rc_var)
  if(NOT DEFINED RUN_MODE)
    set(RUN_MODE ${MODE})
  endif()
  execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${ARGN} -np ${NP} ${PROGRAM} ${RUN_MODE} ${DIR}
                  OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT ${deadline} RESULT_VARIABLE rc)
  message(STATUS "mpirun ${ARGN} -np ${NP} ${MODE}: exit status '${rc}'\n${out}")
  if(rc MATCHES "timeout|Process terminated due to timeout")
    message(FATAL_ERROR "${MODE}: mpirun did not finish within ${deadline} s (a hang)")
  endif()
  foreach(host IN LISTS HOSTS)  # nothing left behind on any host (a second's grace to exit)
    foreach(try RANGE 20)
      execute_process(COMMAND ${MPIEXEC} pids ${host} OUTPUT_VARIABLE left OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(left STREQUAL "")
        break()
      endif()
      execute_process(COMMAND sleep 0.05)
    endforeach()
    if(NOT left STREQUAL "")
      message(FATAL_ERROR "${MODE}: processes left on host ${host} after mpirun ended: ${left}")
    endif()
  endforeach()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "kill")
  run_job(out rc)
  if(rc STREQUAL "0")
    message(FATAL_ERROR "kill: mpirun exited 0 although rank 1 was killed")
  endif()
  run_job(out rc --enable-recovery)
  math(EXPR survivors "${NP} - 1")
  set(found 0)
  foreach(rank RANGE 0 ${survivors})
    if(rank EQUAL 1)
      continue()
    endif()
    if(NOT out MATCHES "\\[rank ${rank}\\] caught (DeadlineExceededError|UnavailableError|AbortedError) after ([0-9.]+) s: ([^\n]*)")
      message(FATAL_ERROR "kill: rank ${rank} did not report a DeadlineExceededError/UnavailableError/AbortedError")
    endif()
    set(waited ${CMAKE_MATCH_2})
    set(text "${CMAKE_MATCH_3}")
    if(NOT text MATCHES "rank\\(s\\) \\[1\\]|rank 1")
      message(FATAL_ERROR "kill: rank ${rank}'s error does not name rank 1: ${text}")
    endif()
    if(DEFINED LOST_HOST AND NOT text MATCHES "host ${LOST_HOST}|on ${LOST_HOST}[;,)]")
      message(FATAL_ERROR "kill: rank ${rank}'s error does not name rank 1's host ${LOST_HOST}: ${text}")
    endif()
    if(waited GREATER 10)
      message(FATAL_ERROR "kill: rank ${rank} needed ${waited} s (timeout 5 s)")
    endif()
    math(EXPR found "${found} + 1")
  endforeach()
  message(STATUS "kill: ${found} survivor(s) named rank 1 within the timeout")
  set(RUN_MODE resume)
  run_job(out rc)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "resume: mpirun exited '${rc}', expected 0")
  endif()
  string(REGEX MATCHALL "\\[rank [0-9]+\\] resumed from [^\n]*/ckpt-3 at step 3" resumed "${out}")
  list(LENGTH resumed n)
  if(NOT n EQUAL NP)
    message(FATAL_ERROR "resume: ${n} of ${NP} ranks resumed from the checkpoint of step 3")
  endif()
elseif(MODE STREQUAL "sigterm")
  run_job(out rc)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "sigterm: mpirun exited '${rc}', expected 0")
  endif()
  string(REGEX MATCHALL "\\[rank [0-9]+\\] stopping after step ([0-9]+)[^\n]*all ranks agree: yes" agreed "${out}")
  list(LENGTH agreed n)
  if(NOT n EQUAL NP)
    message(FATAL_ERROR "sigterm: ${n} of ${NP} ranks reported stopping at an agreed step")
  endif()
  if(NOT out MATCHES "all ranks agree: yes; checkpoint ([^\n]*ckpt-[0-9]+)")
    message(FATAL_ERROR "sigterm: no checkpoint of the stop step was reported")
  endif()
  if(NOT EXISTS "${CMAKE_MATCH_1}.index")
    message(FATAL_ERROR "sigterm: the checkpoint ${CMAKE_MATCH_1} does not exist")
  endif()
else()
  message(FATAL_ERROR "MODE must be kill or sigterm, got '${MODE}'")
endif()
