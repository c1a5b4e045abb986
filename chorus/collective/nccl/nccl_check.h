// Internal to collective/: what the NCCL backends share — the one mapping of NCCL result codes to
// chorus errors, and of chorus dtypes and reduce ops to NCCL's. Defined in nccl.cc; only for
// builds with NCCL (it includes <nccl.h>). Not part of the public API (chorus.h does not include it).
//
// Mapping: ncclInvalidArgument/ncclInvalidUsage → InvalidArgumentError; ncclSystemError/
// ncclRemoteError → UnavailableError; everything else → InternalError. The message names the call,
// file and line, NCCL's error string and ncclGetLastError's text.
#pragma once

#include <nccl.h>

#include <chorus/collective/communicator.h>
#include <chorus/core/dtype.h>

namespace chorus::collective {

[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line);

// ncclFloat32, ... for the dtypes of communicator.h; InvalidArgumentError for the others.
ncclDataType_t nccl_type(DType dtype);
// MEAN is ncclAvg (which divides after summing for integer types, as communicator.h promises).
ncclRedOp_t nccl_op(ReduceOp op);

}  // namespace chorus::collective

// Calls NCCL; anything but ncclSuccess throws as above. (Non-blocking communicators may also
// return ncclInProgress: callers that use them check the result themselves.)
#define CHORUS_NCCL_CHECK(call)                                                                                 \
  do {                                                                                                          \
    ncclResult_t chorus_r_ = (call);                                                                            \
    if (chorus_r_ != ncclSuccess) ::chorus::collective::throw_nccl_error(chorus_r_, #call, __FILE__, __LINE__); \
  } while (0)
