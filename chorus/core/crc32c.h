// CRC-32C (Castagnoli), the checksum of TFRecord framing, TensorBoard event files and TensorFlow
// checkpoints (see docs/formats.md), and TF's "masked" form of it.
//
// Computed with the SSE4.2 crc32 instruction, 8 bytes at a time, when the CPU has it (checked once
// at run time), else with a slicing-by-8 table. Thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

// CRC-32C of `n` bytes, continuing from `crc` (the value returned for the preceding bytes; 0 to
// start). crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0);

// TF's masking (tensorflow/core/lib/hash/crc32c.h): ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline std::uint32_t mask_crc32c(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline std::uint32_t unmask_crc32c(std::uint32_t masked) {
  const std::uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}
inline std::uint32_t masked_crc32c(const void* data, std::size_t n) { return mask_crc32c(crc32c(data, n)); }

// True when the hardware instruction is used (for benchmarks and logs).
bool crc32c_uses_hardware();

}  // namespace chorus
