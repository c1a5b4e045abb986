#include <chorus/distribute/distributed_dataset.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <utility>

#include <chorus/core/device_spec.h>
#include <chorus/core/error.h>
#include <chorus/distribute/input_upload.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace {

// Rows [at, at + len) of `t` (axis 0). String tensors, which ops refuse, are copied on the host.
Tensor slice_rows(const Tensor& t, std::int64_t at, std::int64_t len) {
  std::vector<std::int64_t> dims = t.shape().dims();
  if (!t.is_string()) {
    std::vector<std::int64_t> begin(dims.size(), 0), size = dims;
    begin[0] = at;
    size[0] = len;
    return ops::slice(t, begin, size);
  }
  const std::int64_t row = dims[0] == 0 ? 0 : t.num_elements() / dims[0];
  dims[0] = len;
  Tensor out = Tensor::empty(Shape(dims), DType::kString, t.device_name());
  const std::span<const std::string> src = t.strings();
  std::copy_n(src.begin() + at * row, len * row, out.mutable_strings().begin());
  return out;
}

// Where a replica on `device` keeps a component of `dtype`: its device, except strings for a
// GPU replica, which stay on the host (/CPU:0).
std::string device_for(DType dtype, const std::string& device) {
  if (dtype != DType::kString) return device;
  const DeviceSpec spec = DeviceSpec::parse(device);
  return spec.type && *spec.type == "GPU" ? std::string("/CPU:0") : device;
}

// `t` on the replica's device (or, for strings, the host device device_for names).
Tensor to_replica(const Tensor& t, const std::string& device) {
  const std::string where = device_for(t.dtype(), device);
  if (t.device_name() == where) return t;
  if (t.is_string() && where == "/CPU:0") return t;  // already on a host device: no copy for a GPU replica
  return t.to(where);
}

}  // namespace

const char* auto_shard_policy_name(AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::kAuto: return "auto";
    case AutoShardPolicy::kOff: return "off";
    case AutoShardPolicy::kData: return "data";
  }
  return "?";
}

DistributedDataset::DistributedDataset(data::Dataset dataset, std::vector<std::string> devices, Mode mode,
                                       WorkerSharding sharding)
    : dataset_(std::move(dataset)), devices_(std::move(devices)), mode_(mode), sharding_(sharding) {
  CHORUS_REQUIRE(dataset_.defined(), InvalidArgumentError, "distribute dataset: the dataset is undefined");
  CHORUS_REQUIRE(!devices_.empty(), InvalidArgumentError, "distribute dataset: no replicas");
  CHORUS_REQUIRE(
      sharding_.num_workers >= 1 && sharding_.worker_index >= 0 && sharding_.worker_index < sharding_.num_workers,
      InvalidArgumentError, "distribute dataset: worker ", sharding_.worker_index, " of ", sharding_.num_workers,
      " is out of range");
}

DistributedDataset::Iterator DistributedDataset::make_iterator() const {
  return Iterator(dataset_.make_iterator(), devices_, mode_, sharding_);
}

struct DistributedDataset::Iterator::State {
  using UploadWait = internal::UploadWait;

  State(data::Iterator in, std::vector<std::string> devs, Mode m, WorkerSharding s)
      : input(std::move(in)), devices(std::move(devs)), mode(m), sharding(s) {}

  data::Iterator input;
  std::vector<std::string> devices;
  Mode mode;
  WorkerSharding sharding;
  bool ended = false;
  std::deque<data::Element> pending;  // kOff across workers: slices not handed out yet (host side)

  // The rows of the global batch `element`, checking that every component has them on axis 0.
  static std::int64_t global_batch_rows(const data::Element& element) {
    CHORUS_REQUIRE(!element.empty(), InvalidArgumentError, "distributed dataset: an element has no components");
    const std::int64_t rows = element[0].shape().rank() > 0 ? element[0].shape().dims()[0] : -1;
    for (std::size_t c = 0; c < element.size(); ++c) {
      const Tensor& t = element[c];
      CHORUS_REQUIRE(t.shape().rank() >= 1 && t.shape().dims()[0] == rows, InvalidArgumentError,
                     "experimental_distribute_dataset: every component of a global batch needs the batch on axis 0; "
                     "component ",
                     c, " has shape ", t.shape().to_string(), ", component 0 has ", rows, " rows");
    }
    return rows;
  }

  // Where slice i of `parts` row slices of `rows` rows starts, and its length (the first rows % parts
  // get one more).
  static std::pair<std::int64_t, std::int64_t> slice_range(std::int64_t rows, int parts, int i) {
    const std::int64_t base = rows / parts, extra = rows % parts;
    return {i * base + std::min<std::int64_t>(i, extra), base + (i < extra ? 1 : 0)};
  }

  // The global batch `element` cut into `parts` row slices, on the host.
  static std::vector<data::Element> split_rows(const data::Element& element, int parts) {
    const std::int64_t rows = global_batch_rows(element);
    std::vector<data::Element> out(static_cast<std::size_t>(parts));
    for (int r = 0; r < parts; ++r) {
      const auto [at, len] = slice_range(rows, parts, r);
      for (const Tensor& t : element) out[static_cast<std::size_t>(r)].push_back(slice_rows(t, at, len));
    }
    return out;
  }

  // Rows [at, at + len) of each component of `e` on replica r's device: uploaded from host memory
  // (distribute/input_upload.h: one copy, through pinned staging to a GPU, not waited for), else
  // sliced by ops and copied.
  data::Element place(const data::Element& e, std::int64_t at, std::int64_t len, int r,
                      std::vector<UploadWait>& waits) {
    const std::string& device = devices[static_cast<std::size_t>(r)];
    data::Element out;
    for (const Tensor& t : e) {
      Tensor u = upload.rows(t, at, len, device, r, &waits);
      out.push_back(u.defined() ? std::move(u) : to_replica(slice_rows(t, at, len), device));
    }
    return out;
  }
  // All of `e` (its rows, whole) on replica r's device.
  data::Element place_whole(const data::Element& e, int r, std::vector<UploadWait>& waits) {
    const std::string& device = devices[static_cast<std::size_t>(r)];
    data::Element out;
    for (const Tensor& t : e) {
      Tensor u = t.shape().rank() > 0 ? upload.rows(t, 0, t.shape().dims()[0], device, r, &waits) : Tensor();
      out.push_back(u.defined() ? std::move(u) : t.is_string() ? to_replica(t, device) : t.to(device));
    }
    return out;
  }

  // An element with zero rows shaped like `like` (for replicas the data did not reach).
  static data::Element empty_like(const data::Element& like, const std::string& device) {
    data::Element e;
    for (const Tensor& t : like) {
      std::vector<std::int64_t> dims = t.shape().dims();
      CHORUS_REQUIRE(!dims.empty(), InvalidArgumentError,
                     "distributed dataset: a component is a scalar; batches need "
                     "a batch dimension to split");
      dims[0] = 0;
      e.push_back(Tensor::empty(Shape(dims), t.dtype(), device_for(t.dtype(), device)));
    }
    return e;
  }

  // The next step's batch; `waits` gets the uploads its replicas' streams must wait for
  // (hand_over, in next()).
  std::optional<Batch> produce(std::vector<UploadWait>& waits) {
    const int n = static_cast<int>(devices.size());
    std::vector<data::Element> parts(static_cast<std::size_t>(n));
    const int workers = sharding.num_workers;
    if (mode == Mode::kSplitGlobalBatch && (workers == 1 || sharding.policy != AutoShardPolicy::kOff)) {
      // One worker: the global batch over the n replicas. kData/kAuto: over all workers' replicas,
      // keeping this worker's n consecutive slices.
      auto element = input.next();
      if (!element) return std::nullopt;
      const std::int64_t rows = global_batch_rows(*element);
      const int first = sharding.worker_index * n;
      for (int r = 0; r < n; ++r) {
        const auto [at, len] = slice_range(rows, n * workers, first + r);
        parts[static_cast<std::size_t>(r)] = place(*element, at, len, r, waits);
      }
    } else if (mode == Mode::kSplitGlobalBatch) {
      // kOff across workers: every per-replica slice of every global batch, n per step.
      while (static_cast<int>(pending.size()) < n) {
        auto element = input.next();
        if (!element) break;
        for (auto& s : split_rows(*element, n * workers)) pending.push_back(std::move(s));
      }
      if (pending.empty()) return std::nullopt;
      int got = 0;
      for (; got < n && !pending.empty(); ++got) {
        parts[static_cast<std::size_t>(got)] = place_whole(pending.front(), got, waits);
        pending.pop_front();
      }
      for (int r = got; r < n; ++r)
        parts[static_cast<std::size_t>(r)] = empty_like(parts[0], devices[static_cast<std::size_t>(r)]);
    } else {
      int got = 0;
      for (int r = 0; r < n; ++r) {
        auto element = input.next();
        if (!element) break;
        parts[static_cast<std::size_t>(r)] = place_whole(*element, r, waits);
        ++got;
      }
      if (got == 0) return std::nullopt;
      for (int r = got; r < n; ++r)
        parts[static_cast<std::size_t>(r)] = empty_like(parts[0], devices[static_cast<std::size_t>(r)]);
    }
    return Batch(std::move(parts));
  }

  internal::InputUpload upload;  // the producer thread's

  // The next step is prepared by one persistent thread, started with the iterator: a thread
  // made per step (std::async) cost the loop thread ~50 us of every step, with every replica
  // waiting on it.
  std::mutex mu;
  std::condition_variable cv;
  bool requested = false, ready = false, stopping = false;
  std::optional<Batch> result;
  std::vector<UploadWait> result_waits;  // what `result`'s replicas wait for before reading it
  std::exception_ptr error;
  std::thread producer;

  void start_next() {
    {
      std::lock_guard<std::mutex> lock(mu);
      requested = true;
      ready = false;
    }
    cv.notify_all();
    if (!producer.joinable()) producer = std::thread([this] { produce_loop(); });
  }

  // The batch produced, its uploads handed over to the replicas' streams.
  std::optional<Batch> take() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready; });
    ready = false;
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
    internal::hand_over(result_waits);
    result_waits.clear();
    return std::exchange(result, std::nullopt);
  }

  void produce_loop() {
    // SCHED_BATCH: woken, this thread does not preempt the loop thread, which is about to start
    // the step (with the default policy the wake-up cost the loop thread ~70 us a step on 2
    // cores). It still gets its fair share of the CPU. Failing to set it changes nothing else.
    sched_param param{};
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return requested || stopping; });
        if (stopping) return;
        requested = false;
      }
      std::optional<Batch> batch;
      std::vector<UploadWait> waits;
      std::exception_ptr failure;
      try {
        batch = produce(waits);
      } catch (...) {
        failure = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        result = std::move(batch);
        result_waits = std::move(waits);
        error = failure;
        ready = true;
      }
      cv.notify_all();
    }
  }

  // Lets a step being prepared finish (it may be copying into device memory), then joins.
  ~State() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (producer.joinable()) producer.join();
  }
};

DistributedDataset::Iterator::Iterator(data::Iterator input, std::vector<std::string> devices, Mode mode,
                                       WorkerSharding sharding)
    : state_(std::make_unique<State>(std::move(input), std::move(devices), mode, sharding)) {
  state_->start_next();
}

DistributedDataset::Iterator::~Iterator() = default;
DistributedDataset::Iterator::Iterator(Iterator&&) noexcept = default;
DistributedDataset::Iterator& DistributedDataset::Iterator::operator=(Iterator&& other) noexcept {
  if (this != &other) state_ = std::move(other.state_);
  return *this;
}

std::optional<DistributedDataset::Batch> DistributedDataset::Iterator::next() {
  CHORUS_REQUIRE(state_ != nullptr, FailedPreconditionError, "use of a moved-from distributed iterator");
  if (state_->ended) return std::nullopt;
  std::optional<Batch> batch;
  try {
    batch = state_->take();  // rethrows the pipeline's error
  } catch (...) {
    state_->ended = true;  // the pipeline is broken: later calls return the end
    throw;
  }
  if (!batch) {
    state_->ended = true;
    return std::nullopt;
  }
  state_->start_next();
  return batch;
}

}  // namespace chorus::distribute
