// NCCL across processes over a store (nccl_store.h): the store side channel (nccl_side.cc) under
// the communicator of nccl_process.cc.
#include <chorus/collective/nccl/nccl_store.h>

#include <chorus/collective/nccl/nccl_side.h>
#include <chorus/collective/store/store.h>
#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

std::unique_ptr<Communicator> make_nccl_communicator(const std::string& device, std::shared_ptr<Store> store, int rank,
                                                     int size, const NcclStoreOptions& options) {
  auto side = make_store_side(std::move(store), rank, size);  // checks the arguments in every build
#if defined(CHORUS_WITH_NCCL)
  return create_nccl_communicator(device, std::move(side), options.validate, options.timeout, nullptr);
#else
  (void)options;
  throw UnavailableError(internal::str_cat("make_nccl_communicator(\"", device, "\", ", side->transport(),
                                           "): chorus was built without NCCL; across processes without NCCL, "
                                           "host tensors need the MPI or Gloo backend"));
#endif
}

}  // namespace chorus::collective
