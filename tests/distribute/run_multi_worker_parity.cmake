# Runs multi_worker_parity both ways and compares (CTest: cmake -P; see multi_worker_parity.cc).
#   -DMPIEXEC=mpirun -DFLAGS="--oversubscribe;..." -DPROGRAM=... -DDIR=<scratch directory>
# For 1 and 2 devices per worker: the job under `mpirun -np 2`, the same job without mpirun (the
# program forks two workers with torchrun's variables), then `compare`, which exits 0 only when the
# trained weights are bitwise equal and training moved them. The files are deleted first, so a
# stale one cannot pass; every run has a deadline (a hang fails the test).
foreach(v MPIEXEC PROGRAM DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_multi_worker_parity.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")

function(run what)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 120 RESULT_VARIABLE rc)
  message(STATUS "${what}: exit status '${rc}'\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit status '${rc}')")
  endif()
endfunction()

foreach(devices 1 2)
  run("mpirun -np 2, ${devices} device(s) per worker" ${MPIEXEC} ${FLAGS} -np 2 ${PROGRAM} mpi ${devices}
      "${DIR}/mpi_${devices}.bin")
  run("without mpirun, ${devices} device(s) per worker" ${PROGRAM} store ${devices} "${DIR}/store_${devices}.bin")
  run("compare, ${devices} device(s) per worker" ${PROGRAM} compare "${DIR}/mpi_${devices}.bin"
      "${DIR}/store_${devices}.bin")
endforeach()
