// The store side channel of multi-process NCCL (nccl_side.h) and the GPU-claim exchange. Host
// logic only: compiled and unit-tested without NCCL, MPI or a GPU.
#include <chorus/collective/nccl/nccl_side.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include <chorus/collective/nccl/nccl_bootstrap.h>
#include <chorus/collective/store/store.h>
#include <chorus/collective/store/store_wait.h>
#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

using chorus::internal::join;
using chorus::internal::str_cat;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kSlice{100};  // how often a waiting exchange looks for the abort notice
constexpr const char* kAbortKey = "nccl/abort";

std::string to_bytes(const std::vector<std::int64_t>& words) {
  std::string out(words.size() * sizeof(std::int64_t), '\0');
  std::memcpy(out.data(), words.data(), out.size());
  return out;
}

class StoreSide final : public NcclSide {
 public:
  StoreSide(std::shared_ptr<Store> store, int rank, int size) : store_(std::move(store)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl_store"; }
  std::string transport() const override { return store_->describe(); }
  std::string how_to_choose_gpus() const override { return "by LOCAL_RANK / the resolver's local_rank()"; }

  std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& words, const char* step,
                                       milliseconds timeout) override {
    const std::string base = str_cat("nccl/", exchanges_++, "/", step, "/");
    store_->set(base + std::to_string(rank_), to_bytes(words));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(base + std::to_string(r));
    wait_for(keys, step, timeout);
    std::vector<std::int64_t> all(words.size() * static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const std::string v = store_->get(keys[static_cast<std::size_t>(r)], timeout);
      CHORUS_REQUIRE(v.size() == words.size() * sizeof(std::int64_t), DataLossError, "nccl over ", transport(),
                     ": rank ", r, " sent ", v.size(), " bytes for \"", step, "\" at key \"",
                     keys[static_cast<std::size_t>(r)], "\" where ", words.size() * sizeof(std::int64_t),
                     " were expected (a process of another build, or a store shared with another job?)");
      std::memcpy(all.data() + static_cast<std::size_t>(r) * words.size(), v.data(), v.size());
    }
    return all;
  }

  void broadcast(std::vector<std::int64_t>& words, milliseconds timeout) override {
    const std::string key = str_cat("nccl/", exchanges_++, "/broadcast/0");
    if (rank_ == 0) {
      store_->set(key, to_bytes(words));
      return;
    }
    wait_for({key}, "broadcast", timeout);
    const std::string v = store_->get(key, timeout);
    CHORUS_REQUIRE(v.size() == words.size() * sizeof(std::int64_t), DataLossError, "nccl over ", transport(),
                   ": rank 0 broadcast ", v.size(), " bytes at key \"", key, "\" where ",
                   words.size() * sizeof(std::int64_t), " were expected");
    std::memcpy(words.data(), v.data(), v.size());
  }

  void barrier(milliseconds timeout) override {
    const std::string base = str_cat("nccl/", exchanges_++, "/barrier");
    if (store_->add(base, 1) == size_) store_->set(base + "/all", "");
    wait_for({base + "/all"}, "barrier", timeout);
  }

  void abort(const std::string& notice) noexcept override {
    try {
      if (!store_->check({kAbortKey})) store_->set(kAbortKey, str_cat("rank ", rank_, ": ", notice));
    } catch (const std::exception&) {  // the store is gone: the others find out by their timeout
    }
  }

 private:
  // Waits for `keys`, looking for an abort notice every kSlice; DeadlineExceededError at the
  // deadline naming who is missing (`missing`: the ranks whose keys are not there, or for a single
  // key what that means).
  void wait_for(const std::vector<std::string>& keys, const char* step, milliseconds timeout) {
    const std::vector<std::string> absent = wait_watching(*store_, keys, Clock::now() + timeout, kSlice, [&] {
      if (store_->check({kAbortKey}))
        throw AbortedError(str_cat("nccl over ", transport(), ": rank ", rank_, " stopped waiting for \"", step,
                                   "\": another process aborted: ", store_->get(kAbortKey, milliseconds(0))));
    });
    if (absent.empty()) return;
    std::vector<int> missing;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (std::find(absent.begin(), absent.end(), keys[i]) != absent.end()) missing.push_back(static_cast<int>(i));
    const std::string who = keys.size() > 1 ? str_cat("rank(s) [", join(missing), "] did not take part")
                            : std::string(step) == "broadcast" ? std::string("rank 0 did not send it")
                                                               : std::string("not every rank arrived");
    throw DeadlineExceededError(str_cat("nccl over ", transport(), ": rank ", rank_, " waited ", timeout.count(),
                                        " ms for \"", step, "\": ", who, " (a process stuck, died or never came?)"));
  }

  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  std::uint64_t exchanges_ = 0;  // the same sequence on every process
};

}  // namespace

std::unique_ptr<NcclSide> make_store_side(std::shared_ptr<Store> store, int rank, int size) {
  CHORUS_REQUIRE(store != nullptr && size >= 1 && rank >= 0 && rank < size, InvalidArgumentError,
                 "NCCL over a store: rank ", rank, " of ", size, store ? "" : " without a store",
                 " (need a store and 0 <= rank < size)");
  return std::make_unique<StoreSide>(std::move(store), rank, size);
}

std::vector<GpuClaim> exchange_gpu_claims(NcclSide& side, const GpuClaim& mine, milliseconds timeout) {
  const std::vector<std::int64_t> all = side.all_gather(pack_claim(mine), "gpu_claims", timeout);
  std::vector<GpuClaim> claims;
  for (int r = 0; r < side.size(); ++r) claims.push_back(unpack_claim(all.data() + r * kGpuClaimWords, r));
  return claims;
}

}  // namespace chorus::collective
