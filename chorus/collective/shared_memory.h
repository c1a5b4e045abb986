// Shared-memory collectives between replica threads on logical CPU devices of one process.
//
//   auto comms = chorus::collective::make_shared_memory_group(4);   // one per replica thread
//   // in replica thread r:
//   comms[r]->all_reduce(grad, grad);                                 // in place, sum
//
// Algorithm (bandwidth-optimal, no serial reduce-then-broadcast): after all participants have
// posted their buffers (the one meeting point, which also compares fingerprints), the elements
// are cut into chunks (2 KiB to 64 KiB, about N/k for mid sizes); participants take chunks
// from a shared counter, reduce each across all k inputs in registers, a cache line at a time, and
// write the result straight into that chunk of all k outputs. A participant returns as soon as
// every chunk is done (a counter, not a second barrier: peers that took no chunk, e.g. descheduled
// ones, are not waited for). Every byte is read once and written once per output: 2·k·N bytes of
// traffic for N-byte tensors, spread over the threads that are running (with more replicas than
// cores, a running thread takes the chunks of a descheduled one). broadcast, reduce, all_gather
// and reduce_scatter split the work by rank and close with a second barrier. The meeting points
// are lock-free on the fast path (rendezvous.cc). Any size from 0 elements, any count.
//
// Contract, errors, thread-safety: see communicator.h and in_process.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

// `size` communicators sharing one group; element r is rank r's, to be used by one thread.
std::vector<std::unique_ptr<Communicator>> make_shared_memory_group(int size,
                                                                    const std::string& name = "shared_memory");

}  // namespace chorus::collective
