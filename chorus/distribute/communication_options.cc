#include <chorus/distribute/communication_options.h>

#include <cmath>
#include <string>

#include <chorus/core/error.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace {
bool known(Compression c) {
  return c == Compression::kNone || c == Compression::kFloat16 || c == Compression::kBFloat16;
}
}  // namespace

std::string_view compression_name(Compression compression) {
  switch (compression) {
    case Compression::kNone: return "none";
    case Compression::kFloat16: return "float16";
    case Compression::kBFloat16: return "bfloat16";
  }
  // Not an enumerator (a cast from an integer): a stable spelling for error messages.
  thread_local std::string unknown;
  unknown = str_cat("Compression(", static_cast<int>(compression), ")");
  return unknown;
}

double compression_error_bound(Compression compression, int roundings, int num_replicas) {
  const double u = compression == Compression::kFloat16    ? std::ldexp(1.0, -11)
                   : compression == Compression::kBFloat16 ? std::ldexp(1.0, -8)
                                                           : 0.0;
  return std::pow(1.0 + u, roundings) - 1.0 + 2.0 * num_replicas * std::ldexp(1.0, -24);
}

namespace internal {

void validate_communication_options(const CommunicationOptions& options, std::string_view where) {
  CHORUS_REQUIRE(options.bytes_per_pack >= 0, InvalidArgumentError, where,
                 ": CommunicationOptions.bytes_per_pack must be >= 0 (0: the default), got ", options.bytes_per_pack);
  CHORUS_REQUIRE(std::isfinite(options.timeout_seconds) && options.timeout_seconds >= 0, InvalidArgumentError, where,
                 ": CommunicationOptions.timeout_seconds must be a finite number >= 0 (0: the strategy's), got ",
                 options.timeout_seconds);
  CHORUS_REQUIRE(!options.compression || known(*options.compression), InvalidArgumentError, where,
                 ": CommunicationOptions.compression is ", compression_name(*options.compression),
                 ", not one of Compression::kNone, kFloat16, kBFloat16");
}

CommunicationOptions merge_communication_options(const CommunicationOptions& defaults,
                                                 const CommunicationOptions& explicit_options) {
  CommunicationOptions merged = defaults;
  if (explicit_options.bytes_per_pack > 0) merged.bytes_per_pack = explicit_options.bytes_per_pack;
  if (explicit_options.timeout_seconds > 0) merged.timeout_seconds = explicit_options.timeout_seconds;
  if (explicit_options.implementation != CrossDeviceOps::kAuto) merged.implementation = explicit_options.implementation;
  if (explicit_options.compression) merged.compression = explicit_options.compression;
  return merged;
}

}  // namespace internal
}  // namespace chorus::distribute
