# Runs mpi_peer_loss_test under `mpirun --enable-recovery -np 3` and checks its verdict (CTest:
# cmake -P). -DMPIEXEC=mpirun -DFLAGS="--oversubscribe;..." -DPROGRAM=...
# Fails when rank 0 does not print "[rank 0] PASS" (an error naming rank 1 and its host, after the
# kill and within 10 s of it, rank 2's graceful exit not reported), or when the job outlives the
# deadline: with only the 300 s collective timeout to notice the death, it would.
foreach(v MPIEXEC PROGRAM)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_mpi_peer_loss.cmake: -D${v}=... is required")
  endif()
endforeach()
set(deadline 60)
execute_process(COMMAND ${MPIEXEC} ${FLAGS} --enable-recovery -np 3 ${PROGRAM}
                OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT ${deadline} RESULT_VARIABLE rc)
message(STATUS "mpirun --enable-recovery -np 3: exit status '${rc}'\n${out}")
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job did not end within ${deadline} s: the survivors waited for the dead rank")
endif()
if(NOT out MATCHES "\\[rank 0\\] PASS UnavailableError")
  message(FATAL_ERROR "rank 0 did not pass (see its line above)")
endif()
if(NOT out MATCHES "\\[rank 0\\] finalized")
  message(FATAL_ERROR "rank 0 did not get through MPI_Finalize")
endif()
