// Hierarchical collectives: a local group inside each process (shared memory, virtual GPU or
// NCCL) plus a cross-process group (MPI, or NCCL across processes) joining the processes' local
// rank 0s — Horovod's hierarchical all-reduce.
//
//   all_reduce  = local reduce to local rank 0 → cross all_reduce among local rank 0s → local broadcast
//
// so only one participant per process talks across processes, with data already reduced k-fold.
//
// Ranks: global rank = process × k + local rank, size = P × k (P = cross->size(), k = local size).
// Every process must have the same number of local participants. Only local rank 0's object
// uses `cross`; the others pass nullptr.
//
//   broadcast       the root's process first brings the data to its local rank 0, then as above
//   reduce          as all_reduce, but the result goes only to the global root
//   all_gather      local all_gather → cross all_gather → local broadcast (global rank order)
//   reduce_scatter  local reduce → cross reduce_scatter (each process gets its k blocks) → the
//                   blocks are handed out locally by a SUM reduce_scatter in which only local rank
//                   0 contributes (adding zeros is exact)
//   barrier         local barrier → cross barrier → local barrier
//
// MEAN is the mean of the processes' local means, which equals the global mean because every
// process has k participants (for integer dtypes the two truncating divisions may round
// differently from one division of the total). Temporaries live on each participant's device.
// Errors: as communicator.h; a failure of the cross step aborts the local group so the local
// participants waiting for their rank 0 are released at once.
#pragma once

#include <memory>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

// `local`: this participant's communicator in its process's local group. `cross`: for local rank
// 0, its communicator among the processes' local rank 0s; nullptr for the other local ranks.
std::unique_ptr<Communicator> make_hierarchical(std::unique_ptr<Communicator> local,
                                                std::shared_ptr<Communicator> cross, int process_index,
                                                int num_processes);

}  // namespace chorus::collective
