// A tiny MPI program for chorus_run_mpi_test.cc: every rank checks that CHORUS_LAUNCH_PROBE reached
// it, the ranks sum their ids with MPI_Allreduce, and rank 0 prints one line. `--exit-code N`:
// the last rank exits with N after MPI_Finalize (chorus-run must return mpirun's status).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* probe = std::getenv("CHORUS_LAUNCH_PROBE");
  int ok = probe && std::strcmp(probe, "forwarded") == 0 ? 1 : 0, all_ok = 0, sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("sum of ranks %d over %d processes; CHORUS_LAUNCH_PROBE %s\n", sum, size,
                all_ok ? "forwarded to every rank" : "MISSING on a rank");
    std::fflush(stdout);
  }
  MPI_Finalize();
  int code = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--exit-code" && rank == size - 1) code = std::atoi(argv[i + 1]);
  return all_ok ? code : 1;
}
