// Environment knobs, read in one place (STYLE.md habit 12). Every variable chorus reads is
// listed here with its meaning; docs/errors.md ("Environment variables") is the user-facing copy of this list.
//
//   CHORUS_LOG_LEVEL            DEBUG | INFO | WARNING | ERROR (or 0-3). Default INFO.
//   TF_FORCE_GPU_ALLOW_GROWTH   "true"/"false": memory growth for every GPU, as in TensorFlow.
//   CUDA_VISIBLE_DEVICES        honoured by the CUDA runtime (chorus-devices prints it).
//   OMPI_COMM_WORLD_RANK/SIZE   set by Open MPI's mpirun (PMI_RANK/PMI_SIZE by MPICH/Slurm): the
//                               process rank, shown in log lines of multi-process runs.
//
// Thread-safe: getenv is only read, never written, by chorus.
#pragma once

#include <optional>
#include <string>

namespace chorus::env {

// The variable's value, or nullopt when unset. An empty value counts as set.
std::optional<std::string> get(const char* name);

// Parses "1/0/true/false/yes/no/on/off" (any case). Unset → nullopt.
// A value outside that set throws InvalidArgumentError naming the variable and the valid values.
std::optional<bool> get_bool(const char* name);

// The rank of this process when a launcher started several (OMPI_COMM_WORLD_RANK with
// OMPI_COMM_WORLD_SIZE > 1, else PMI_RANK with PMI_SIZE > 1); nullopt for a single process or
// unparsable values. Read once.
std::optional<int> launcher_rank();

}  // namespace chorus::env
