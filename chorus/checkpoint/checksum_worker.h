// Internal to checkpoint/: a thread that computes the CRC-32C of bytes while the caller moves
// them, so checksumming a tensor costs no time beside its write(2) or read(2) (on another core).
//
//   ChecksumWorker w;                       // starts its thread
//   w.add(tensor_bytes, n);                 // returns at once; CRC of these bytes runs there
//   data_file.write_all({tensor_bytes, n}); // meanwhile
//   std::uint32_t crc = w.take();           // waits; the CRC of everything added since the last take
//
// Pieces added one after another are checksummed in order as one byte stream. add() waits while
// the previous piece is still being checksummed, so at most one is in flight; its bytes must stay
// valid and unchanged until the next add() or take() returns (also when the caller's I/O fails:
// take() before letting the bytes go). BundleWriter uses it for tensors of 1 MiB and more.
//
// Thread-safety: one caller thread at a time. The destructor joins the thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace chorus::train::internal {

class ChecksumWorker {
 public:
  ChecksumWorker();
  ~ChecksumWorker();
  ChecksumWorker(const ChecksumWorker&) = delete;
  ChecksumWorker& operator=(const ChecksumWorker&) = delete;

  // Queues `n` bytes at `data` (after the previous piece finished) and returns.
  void add(const void* data, std::size_t n);
  // Waits for every added piece; returns their CRC-32C (unmasked) and starts a new stream.
  std::uint32_t take();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  const void* data_ = nullptr;  // the piece in flight; nullptr when idle
  std::size_t n_ = 0;
  std::uint32_t crc_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace chorus::train::internal
