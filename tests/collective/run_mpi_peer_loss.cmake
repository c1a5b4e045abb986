# Runs mpi_peer_loss_test under `mpirun --enable-recovery -np 3` and checks its verdict (CTest:
# cmake -P). -DMPIEXEC=mpirun -DFLAGS="--oversubscribe;..." -DPROGRAM=... [-DMODE=notice]
# MODE notice: rank 2 has no monitor and must learn of the death from rank 0's notice ("[rank 2] PASS").
# Fails when rank 0 does not print "[rank 0] PASS" (an error naming rank 1 and its host, after the
# kill and within 10 s of it, rank 2's graceful exit not reported), or when the job outlives the
# deadline: with only the 300 s collective timeout to notice the death, it would.
foreach(v MPIEXEC PROGRAM)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_mpi_peer_loss.cmake: -D${v}=... is required")
  endif()
endforeach()
set(deadline 60)
execute_process(COMMAND ${MPIEXEC} ${FLAGS} --enable-recovery -np 3 ${PROGRAM} ${MODE}
                OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT ${deadline} RESULT_VARIABLE rc)
message(STATUS "mpirun --enable-recovery -np 3: exit status '${rc}'\n${out}")
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job did not end within ${deadline} s: the survivors waited for the dead rank")
endif()
if(NOT out MATCHES "\\[rank 0\\] PASS UnavailableError")
  message(FATAL_ERROR "rank 0 did not pass (see its line above)")
endif()
if(MODE STREQUAL "notice" AND NOT out MATCHES "\\[rank 2\\] PASS UnavailableError")
  message(FATAL_ERROR "rank 2 (no monitor of its own) was not told of the loss by rank 0 (see its line above)")
endif()
if(NOT out MATCHES "\\[rank 0\\] finalized")
  message(FATAL_ERROR "rank 0 did not get past the end of its MpiEnvironment (MPI_Finalize waiting for the dead?)")
endif()
