#include <chorus/distribute/multi_worker_mirrored_strategy.h>

#include <chorus/distribute/uneven_all_gather.h>
#include <chorus/distribute/worker_transport.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include <chorus/collective/gpu_claim.h>
#include <chorus/collective/hierarchical.h>
#include <chorus/collective/nccl/nccl.h>
#include <chorus/core/config.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>
#include <chorus/core/strings.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {

using chorus::internal::join;
using chorus::internal::str_cat;

namespace {

constexpr const char* kHost = "/cpu:0";                         // staging device of cross-worker control traffic
constexpr chorus::internal::JoinOptions kQuoted{.quote = "'"};  // device lists: 'CPU:0', 'CPU:1'

// Every worker's `mine` (at most 1023 bytes), in rank order, as fixed records of int64 words.
std::vector<std::string> all_gather_strings(collective::Communicator& comm, const std::string& mine,
                                            std::chrono::milliseconds timeout) {
  constexpr std::int64_t kWords = 128;
  CHORUS_REQUIRE(mine.size() < kWords * 8, InternalError, "all_gather_strings: record of ", mine.size(), " bytes");
  std::vector<std::int64_t> words(kWords, 0);
  std::memcpy(words.data(), mine.data(), mine.size());
  Tensor in = Tensor::from_vector<std::int64_t>(words, {kWords}, kHost);
  Tensor all = Tensor::empty({kWords * comm.size()}, DType::kInt64, kHost);
  comm.all_gather(in, all, {.timeout = timeout})->wait(timeout);
  const std::vector<std::int64_t> got = all.to_vector<std::int64_t>();
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(reinterpret_cast<const char*>(got.data() + r * kWords));
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string hex(std::int64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

std::string physical_pci(const LogicalDevice& d) {
  for (const auto& p : config::list_physical_devices("GPU"))
    if (p.name == d.physical_name) return p.pci_bus_id.empty() ? p.name : p.pci_bus_id;
  return d.physical_name;
}

}  // namespace

// --- device selection and GPU claims (pure) ----------------------------------------------------

std::vector<std::string> select_worker_devices(const std::vector<LogicalDevice>& logical, int local_rank,
                                               WorkerDevicePolicy policy, int cpu_devices_per_worker) {
  std::vector<const LogicalDevice*> gpus, cpus;
  for (const auto& d : logical) (d.device_type == "GPU" ? gpus : cpus).push_back(&d);
  std::vector<std::string> all;
  for (const auto& d : logical) all.push_back(d.name);
  if (policy == WorkerDevicePolicy::kAuto)
    policy = gpus.empty() ? WorkerDevicePolicy::kCpu : WorkerDevicePolicy::kLocalRankGpu;
  std::vector<std::string> out;
  switch (policy) {
    case WorkerDevicePolicy::kLocalRankGpu: {
      CHORUS_REQUIRE(!gpus.empty(), InvalidArgumentError,
                     "MultiWorkerMirroredStrategy: device policy local_rank_gpu "
                     "needs a GPU, but this process has none (devices: ",
                     join(all, kQuoted), ")");
      CHORUS_REQUIRE(local_rank >= 0, InvalidArgumentError, "MultiWorkerMirroredStrategy: local rank ", local_rank,
                     " is negative");
      std::vector<int> physical;  // distinct physical GPU indices, in order
      for (const auto* g : gpus)
        if (std::find(physical.begin(), physical.end(), g->physical_index) == physical.end())
          physical.push_back(g->physical_index);
      std::sort(physical.begin(), physical.end());
      const int mine = physical[static_cast<std::size_t>(local_rank) % physical.size()];
      for (const auto* g : gpus)
        if (g->physical_index == mine) out.push_back(g->name);
      return out;
    }
    case WorkerDevicePolicy::kAllLocalGpus:
      CHORUS_REQUIRE(!gpus.empty(), InvalidArgumentError,
                     "MultiWorkerMirroredStrategy: device policy all_local_gpus "
                     "needs a GPU, but this process has none (devices: ",
                     join(all, kQuoted), ")");
      for (const auto* g : gpus) out.push_back(g->name);
      return out;
    case WorkerDevicePolicy::kCpu:
      CHORUS_REQUIRE(cpu_devices_per_worker >= 1 && cpu_devices_per_worker <= static_cast<int>(cpus.size()),
                     InvalidArgumentError,
                     "MultiWorkerMirroredStrategy: cpu_devices_per_worker = ", cpu_devices_per_worker,
                     " but this process has ", cpus.size(), " logical CPU device(s) (", join(all, kQuoted),
                     "); configure them first with config::set_logical_device_configuration");
      for (int i = 0; i < cpu_devices_per_worker; ++i) out.push_back(cpus[static_cast<std::size_t>(i)]->name);
      return out;
    case WorkerDevicePolicy::kAuto: break;
  }
  throw InternalError("select_worker_devices: unknown policy");
}

void check_unique_gpus(const std::vector<WorkerGpus>& workers) {
  std::vector<collective::GpuClaim> claims;
  for (const WorkerGpus& w : workers)
    for (const std::string& pci : w.pci_bus_ids) claims.push_back({.rank = w.rank, .host = w.host, .pci_bus_id = pci});
  collective::check_distinct_gpus(claims, "by local rank: WorkerDevicePolicy::kLocalRankGpu, or CUDA_VISIBLE_DEVICES");
}

// --- the strategy ------------------------------------------------------------------------------

struct MultiWorkerMirroredStrategy::Plan {
  ClusterResolver resolver;
  std::vector<std::string> devices;
  WorkerGroup group;
  bool gpu = false;
  WorkerTransportChoice transport;  // with several workers
};

internal::WorkerTransportOwner::WorkerTransportOwner() = default;
internal::WorkerTransportOwner::~WorkerTransportOwner() = default;

namespace {

std::string_view implementation_name(CommunicationImplementation c) {
  switch (c) {
    case CommunicationImplementation::kAuto: return "auto";
    case CommunicationImplementation::kRing: return "ring (MPI or Gloo)";
    case CommunicationImplementation::kNccl: return "nccl";
  }
  return "?";
}

}  // namespace

MultiWorkerMirroredStrategy::Plan MultiWorkerMirroredStrategy::make_plan(const MultiWorkerMirroredStrategyOptions& o) {
  MultiWorkerMirroredStrategy::Plan plan;
  check_sharding(o.sharding, "MultiWorkerMirroredStrategy");
  plan.resolver = o.cluster_resolver ? *o.cluster_resolver : ClusterResolver::from_environment();
  const ClusterResolver& r = plan.resolver;
  CHORUS_REQUIRE(r.worker_index() >= 0, InvalidArgumentError,
                 "MultiWorkerMirroredStrategy runs on \"chief\" and "
                 "\"worker\" tasks; this task is ",
                 r.task_type(), ":", r.task_id(), " (cluster ", r.cluster_spec().to_string(), ")");
  plan.devices = o.devices.empty() ? select_worker_devices(config::list_logical_devices(), r.local_rank(),
                                                           o.device_policy, o.cpu_devices_per_worker)
                                   : o.devices;
  CHORUS_REQUIRE(!plan.devices.empty(), InvalidArgumentError, "MultiWorkerMirroredStrategy: no devices");
  std::vector<LogicalDevice> logical;
  for (const std::string& name : plan.devices) logical.push_back(runtime::find(name)->device());
  int gpus = 0;
  for (const auto& d : logical) gpus += d.device_type == "GPU" ? 1 : 0;
  CHORUS_REQUIRE(gpus == 0 || gpus == static_cast<int>(logical.size()), InvalidArgumentError,
                 "MultiWorkerMirroredStrategy: a worker's devices must be all GPUs or all CPUs, got ",
                 join(plan.devices, kQuoted));
  plan.gpu = gpus > 0;
  const int k = static_cast<int>(logical.size());
  const int workers = r.num_workers();
  const auto impl = o.implementation;
  CHORUS_REQUIRE(!(plan.gpu && impl == CommunicationImplementation::kRing), InvalidArgumentError,
                 "MultiWorkerMirroredStrategy: implementation ring (MPI or Gloo) was requested but the devices are "
                 "GPUs; the MPI and Gloo backends move host tensors only — use kNccl or kAuto");
  CHORUS_REQUIRE(!(!plan.gpu && impl == CommunicationImplementation::kNccl), InvalidArgumentError,
                 "MultiWorkerMirroredStrategy: implementation nccl was requested but the devices are CPUs (",
                 join(plan.devices, kQuoted), "); NCCL needs GPUs — use kRing or kAuto");
  if (plan.gpu && workers > 1)
    CHORUS_REQUIRE(!collective::nccl_version().empty(), UnavailableError,
                   "MultiWorkerMirroredStrategy: GPU workers "
                   "reduce across processes with NCCL, but this build has no NCCL");
  // The local part (k > 1) is chosen as MirroredStrategy would; the cross-process part by device kind.
  CrossDeviceChoice local =
      k > 1 ? choose_cross_device_ops(logical) : CrossDeviceChoice{CrossDeviceOps::kSharedMemory, ""};
  if (k == 1 && plan.gpu) local.ops = CrossDeviceOps::kVirtualGpu;
  if (workers > 1) plan.transport = choose_worker_transport(r, plan.gpu);  // MPI or the store: no I/O yet
  const std::string& across = plan.transport.description;
  std::string reason;
  if (workers == 1)
    reason = k > 1 ? local.reason : "one replica: no reduction";
  else if (k == 1)
    reason = str_cat(workers, " workers x 1 ", plan.gpu ? "GPU" : "CPU device", ": ", across);
  else
    reason = str_cat(workers, " workers x ", k, " devices: hierarchical (", cross_device_ops_name(local.ops),
                     " in each process, then ", across, " among the processes' first replicas)");
  if (impl != CommunicationImplementation::kAuto)
    reason += str_cat("; implementation ", implementation_name(impl), " requested");
  plan.group = {workers, r.worker_index(), {local.ops, reason}};
  return plan;
}

namespace {

// The bytes of `t` on the host.
std::vector<std::uint8_t> host_bytes(const Tensor& t) {
  std::vector<std::uint8_t> raw(t.nbytes());
  if (!raw.empty()) t.copy_to_host(raw.data());
  return raw;
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerMirroredStrategyOptions& options)
    : MultiWorkerMirroredStrategy(options, make_plan(options)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerMirroredStrategyOptions& options, Plan plan)
    : Strategy("MultiWorkerMirroredStrategy", plan.devices, plan.group, /*use_threads=*/true, options.timeout),
      resolver_(std::move(plan.resolver)),
      options_(options),
      gpu_(plan.gpu) {
  set_communication_options(options.communication_options);
  sharding_stage_ = options.sharding.stage;
  offload_optimizer_state_ = options.sharding.offload_optimizer_state;
  prefetch_limit_ = options.sharding.prefetch_limit;
  set_overlap(options.overlap_gradient_all_reduce, resolver_.local_size(), resolver_.num_workers() > 1);
  const int workers = resolver_.num_workers();
  if (workers > 1) env::set_process_rank(resolver_.worker_index());  // core/env.h: TF_CONFIG too
  if (workers > 1) {
    transport_ = std::make_unique<WorkerTransport>(std::move(plan.transport), resolver_, options.timeout);
    worker_comm_ = transport_->make_worker_communicator();
    CHORUS_REQUIRE(worker_comm_->size() == workers, FailedPreconditionError,
                   "MultiWorkerMirroredStrategy: the cluster has ", workers, " workers (", resolver_.source(), ") but ",
                   transport_->uses_mpi() ? "MPI_COMM_WORLD" : "the rendezvous", " has ", worker_comm_->size(),
                   " processes; start one process per worker");
    // One exchange tells every worker everything it must agree on, so all reach the same verdict.
    std::vector<std::string> pcis;
    if (gpu_)
      for (const auto& d : logical_devices()) pcis.push_back(physical_pci(d));
    const std::string mine =
        str_cat(resolver_.worker_index(), "|", num_local_replicas(), "|", host_name_or("unknown-host"), "|",
                join(pcis, {.separator = ","}), "|", overlaps_gradient_all_reduce() ? 1 : 0, "|", prefetch_limit());
    const std::vector<std::string> all = all_gather_strings(*worker_comm_, mine, options.timeout);
    std::vector<WorkerGpus> claims;
    std::string counts;
    bool same_count = true;
    for (int r = 0; r < workers; ++r) {
      const std::vector<std::string> f = split(all[static_cast<std::size_t>(r)], '|');
      CHORUS_REQUIRE(f.size() == 6, InternalError, "MultiWorkerMirroredStrategy: bad worker record '",
                     all[static_cast<std::size_t>(r)], "' from rank ", r);
      CHORUS_REQUIRE(std::stoi(f[0]) == r, FailedPreconditionError,
                     "MultiWorkerMirroredStrategy: ", transport_->uses_mpi() ? "MPI rank " : "rendezvous rank ", r,
                     " is worker ", f[0],
                     " according to its cluster resolver; the worker index must equal the rank (TF_CONFIG's "
                     "order: chief, then workers)");
      same_count = same_count && std::stoi(f[1]) == num_local_replicas();
      counts += str_cat(r ? ", " : "", "rank ", r, ": ", f[1]);
      if (!f[3].empty()) claims.push_back({r, f[2], split(f[3], ',')});
      // Stage 3's prefetch moves gathers earlier: every worker must prefetch alike.
      CHORUS_REQUIRE(std::stoi(f[5]) == prefetch_limit(), InvalidArgumentError,
                     "MultiWorkerMirroredStrategy: sharding.prefetch_limit differs between workers: worker ", r, " on ",
                     f[2], " has ", f[5], ", this worker (", resolver_.worker_index(), ") ", prefetch_limit(),
                     "; give every worker the same ShardingOptions");
      // Overlap must be the same everywhere (the replicas' collectives come in another order with
      // it): off on one worker (its host has no core free) is off on all.
      if (f[4] == "0" && overlaps_gradient_all_reduce())
        turn_overlap_off(str_cat("off: worker ", r, " on ", f[2], " does not overlap, so no worker does"));
    }
    CHORUS_REQUIRE(same_count, InvalidArgumentError,
                   "MultiWorkerMirroredStrategy: every worker needs the same number "
                   "of local devices, got ",
                   counts);
    if (gpu_) check_unique_gpus(claims);
  }
  make_communicators();
  CHORUS_LOG(INFO) << "Using MultiWorkerMirroredStrategy: " << resolver_.to_string() << ", local devices ("
                   << join(replica_devices(), kQuoted) << "), " << num_replicas_in_sync() << " replicas in sync; "
                   << cross_device_ops().reason << sharding_description(sharding_stage_, num_replicas_in_sync())
                   << offload_description(offload_optimizer_state_)
                   << "; all-reduce overlapped with backward: " << overlap_reason();
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() {
  // Before any communicator closes (worker_comm_ now, Strategy's after this body): see the header's "End".
  if (transport_) transport_->goodbye();
}

std::vector<std::unique_ptr<collective::Communicator>> MultiWorkerMirroredStrategy::create_communicators() {
  const int workers = num_workers();
  if (workers == 1) return Strategy::create_communicators();
  const int k = num_local_replicas();
  // A fresh communicator (on the store: fresh keys) at every call, also after a failure.
  auto cross = [&] { return transport_->make_cross_communicator(gpu_ ? replica_devices()[0] : std::string()); };
  std::vector<std::unique_ptr<collective::Communicator>> out;
  if (k == 1) {
    out.push_back(cross());
    return out;
  }
  auto local = make_cross_device_communicators(logical_devices(), cross_device_ops());
  std::shared_ptr<collective::Communicator> across(cross());
  for (int i = 0; i < k; ++i)
    out.push_back(collective::make_hierarchical(std::move(local[static_cast<std::size_t>(i)]),
                                                i == 0 ? across : nullptr, worker_index(), workers));
  return out;
}

Tensor MultiWorkerMirroredStrategy::chief_initial_value(const Tensor& value) {
  if (!worker_comm_) return value;
  // The chief's value, as raw bytes (any dtype) in int64 words, to every worker (on the host).
  std::vector<std::uint8_t> raw = host_bytes(value);
  if (raw.empty()) return value;
  const std::int64_t words = static_cast<std::int64_t>((raw.size() + 7) / 8);
  std::vector<std::int64_t> buf(static_cast<std::size_t>(words), 0);
  std::memcpy(buf.data(), raw.data(), raw.size());
  Tensor t = Tensor::from_vector<std::int64_t>(buf, {words}, kHost);
  worker_comm_->broadcast(t, {.root = 0, .timeout = options_.timeout})->wait(options_.timeout);
  t.copy_to_host(buf.data());
  std::memcpy(raw.data(), buf.data(), raw.size());
  return Tensor::from_host(raw.data(), value.shape(), value.dtype(), kHost);
}

void MultiWorkerMirroredStrategy::initialize_components(const VariableArgs& args, std::vector<Variable>& components) {
  if (!worker_comm_ || components.empty()) return;
  const Tensor first = components[0].value();
  if (first.num_elements() > 0) {
    const Tensor value = chief_initial_value(first);
    for (Variable& c : components) c.assign(value.to(c.device()));
  }
  VariableSynchronization sync = args.synchronization;
  if (sync != VariableSynchronization::kOnRead) {  // ON_READ variables (metrics) legitimately differ
    std::lock_guard<std::mutex> lock(mu_);
    unchecked_.emplace_back(args.name, std::weak_ptr<VariableBase>(components[0].impl()));
  }
}

void MultiWorkerMirroredStrategy::before_run() {
  if (worker_comm_ && options_.check_variables) check_variables_equal();
}

void MultiWorkerMirroredStrategy::check_variables_equal() {
  std::vector<std::pair<std::string, std::weak_ptr<VariableBase>>> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    todo.swap(unchecked_);
  }
  // After the first run, only a worker with new variables starts an exchange; since every worker
  // creates the same variables (SPMD), they all have some or none. (One that created variables the
  // others did not meets them in a different collective: a timeout naming it, not a hang.)
  if (todo.empty() && checked_once_) return;
  checked_once_ = true;
  const auto timeout = options_.timeout;
  std::vector<std::int64_t> crcs;
  std::uint32_t combined = 0;
  for (const auto& [name, weak] : todo) {
    std::uint32_t crc = 0xFFFFFFFFu;  // a variable destroyed before its check
    if (auto v = weak.lock()) {
      const std::vector<std::uint8_t> raw = host_bytes(v->value());
      crc = crc32c(raw.data(), raw.size());
    }
    crcs.push_back(crc);
    combined = crc32c(&crc, sizeof(crc), combined);
  }
  const int workers = worker_comm_->size();
  Tensor head = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(todo.size()), combined}, {2}, kHost);
  Tensor heads = Tensor::empty({2 * workers}, DType::kInt64, kHost);
  worker_comm_->all_gather(head, heads, {.timeout = timeout})->wait(timeout);
  const std::vector<std::int64_t> h = heads.to_vector<std::int64_t>();
  bool same = true, same_count = true;
  std::string counts;
  for (int r = 0; r < workers; ++r) {
    same = same && h[2 * r] == h[0] && h[2 * r + 1] == h[1];
    same_count = same_count && h[2 * r] == h[0];
    counts += str_cat(r ? ", " : "", "rank ", r, ": ", h[2 * r]);
  }
  if (same) return;
  CHORUS_REQUIRE(same_count, FailedPreconditionError,
                 "MultiWorkerMirroredStrategy: the workers created different "
                 "numbers of variables before this step (",
                 counts, "); every worker must build the same model");
  if (todo.empty()) return;
  const auto n = static_cast<std::int64_t>(todo.size());
  Tensor all = Tensor::empty({n * workers}, DType::kInt64, kHost);
  worker_comm_->all_gather(Tensor::from_vector<std::int64_t>(crcs, {n}, kHost), all, {.timeout = timeout})
      ->wait(timeout);
  const std::vector<std::int64_t> c = all.to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<int> differ;
    for (int r = 1; r < workers; ++r)
      if (c[static_cast<std::size_t>(r * n + i)] != c[static_cast<std::size_t>(i)]) differ.push_back(r);
    if (differ.empty()) continue;
    std::string ranks;
    for (int r : differ)
      ranks += str_cat(ranks.empty() ? "" : ", ", "rank ", r, " has ", hex(c[static_cast<std::size_t>(r * n + i)]));
    throw FailedPreconditionError(
        str_cat("MultiWorkerMirroredStrategy: variable '", todo[static_cast<std::size_t>(i)].first,
                "' differs across workers before the step: CRC32C ", hex(c[static_cast<std::size_t>(i)]),
                " on rank 0 (chief) but ", ranks,
                ". Variables are broadcast from the chief when created, so it was changed "
                "on some workers only afterwards (an assign outside strategy.run, a restore on one worker)"));
  }
}

void MultiWorkerMirroredStrategy::worker_barrier(std::string_view tag) const {
  if (!worker_comm_) return;
  try {
    worker_comm_->barrier({.timeout = options_.timeout})->wait(options_.timeout);
  } catch (const Error& e) {
    throw_error(e.code(), str_cat(tag, ": ", e.what()));
  }
}

std::int64_t MultiWorkerMirroredStrategy::sum_over_workers(std::int64_t local) const {
  if (!worker_comm_) return local;
  Tensor n = Tensor::from_vector<std::int64_t>({local}, {1}, kHost);
  worker_comm_->all_reduce(n, n, {.op = collective::ReduceOp::kSum, .timeout = options_.timeout})
      ->wait(options_.timeout);
  return n.to_vector<std::int64_t>()[0];
}

std::vector<double> MultiWorkerMirroredStrategy::sum_over_workers(std::vector<double> local) const {
  if (!worker_comm_ || local.empty()) return local;
  Tensor v = Tensor::from_vector<double>(local, {static_cast<std::int64_t>(local.size())}, kHost);
  worker_comm_->all_reduce(v, v, {.op = collective::ReduceOp::kSum, .timeout = options_.timeout})
      ->wait(options_.timeout);
  return v.to_vector<double>();
}

Tensor MultiWorkerMirroredStrategy::reduce(ReduceOp op, const PerReplica<Tensor>& value,
                                           std::optional<int> axis) const {
  if (!worker_comm_) return Strategy::reduce(op, value, axis);
  Tensor local = Strategy::reduce(ReduceOp::kSum, value, axis);
  std::int64_t count = value.num_replicas();
  if (axis) {
    count = 0;
    for (const Tensor& t : value.values()) {
      const int a = *axis < 0 ? *axis + t.shape().rank() : *axis;
      count += t.shape().dims()[static_cast<std::size_t>(a)];
    }
  }
  const auto timeout = options_.timeout;
  Tensor in = local.to(kHost);
  Tensor sum = Tensor::empty(in.shape(), in.dtype(), kHost);
  worker_comm_->all_reduce(in, sum, {.op = collective::ReduceOp::kSum, .timeout = timeout})->wait(timeout);
  if (op == ReduceOp::kMean) {
    Tensor n = Tensor::from_vector<std::int64_t>({count}, {1}, kHost);
    worker_comm_->all_reduce(n, n, {.op = collective::ReduceOp::kSum, .timeout = timeout})->wait(timeout);
    sum = ops::div(
        sum, ops::scalar_like(sum, static_cast<double>(std::max<std::int64_t>(n.to_vector<std::int64_t>()[0], 1))));
  }
  const std::string dest = replica_devices()[0];
  return sum.device_name() == dest ? sum : sum.to(dest);
}

Tensor MultiWorkerMirroredStrategy::gather(const PerReplica<Tensor>& value, int axis) const {
  Tensor local = Strategy::gather(value, axis);
  if (!worker_comm_) return local;
  const int rank = local.shape().rank();
  const int a = axis < 0 ? axis + rank : axis;
  CHORUS_REQUIRE(a >= 0 && a < rank, InvalidArgumentError, "gather: axis ", axis, " is out of range for shape ",
                 local.shape().to_string());
  Tensor joined_all = internal::all_gather_uneven(*worker_comm_, local, a, kHost, options_.timeout);
  const std::string dest = replica_devices()[0];
  return joined_all.device_name() == dest ? joined_all : joined_all.to(dest);
}

DistributedDataset MultiWorkerMirroredStrategy::experimental_distribute_dataset(const data::Dataset& dataset) const {
  return experimental_distribute_dataset(dataset, options_.auto_shard_policy);
}

void MultiWorkerMirroredStrategy::check_counts_agree(std::string_view what,
                                                     const std::vector<WorkerCount>& counts) const {
  if (!worker_comm_ || counts.empty()) return;
  const auto n = static_cast<std::int64_t>(counts.size());
  const int workers = worker_comm_->size();
  std::vector<std::int64_t> mine;
  for (const auto& c : counts) mine.push_back(c.value);
  Tensor all = Tensor::empty({n * workers}, DType::kInt64, kHost);
  worker_comm_->all_gather(Tensor::from_vector<std::int64_t>(mine, {n}, kHost), all, {.timeout = options_.timeout})
      ->wait(options_.timeout);
  const std::vector<std::int64_t> got = all.to_vector<std::int64_t>();
  const auto at = [&](int w, std::int64_t i) { return got[static_cast<std::size_t>(w * n + i)]; };
  bool differ = false;
  for (std::int64_t i = 0; i < n && !differ; ++i) {
    bool known = true;
    for (int w = 0; w < workers; ++w) known = known && at(w, i) != data::kUnknownCardinality;
    for (int w = 1; w < workers && known; ++w) differ = differ || at(w, i) != at(0, i);
  }
  if (!differ) return;
  std::string list;
  for (int w = 0; w < workers; ++w) {
    list += str_cat(w ? "; " : "", "worker ", w, ":");
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t v = at(w, i);
      const std::string value = v == data::kUnknownCardinality    ? std::string("unknown")
                                : v == data::kInfiniteCardinality ? std::string("infinitely many")
                                                                  : std::to_string(v);
      list += str_cat(i ? ", " : " ", value, " ", counts[static_cast<std::size_t>(i)].name);
    }
  }
  throw InvalidArgumentError(str_cat(
      what, " differ across workers: ", list,
      ". Every worker must read the same data (same sizes, files and seeds): "
      "otherwise the workers take different numbers of steps and the ones with more wait for the others until the "
      "collective timeout. Nothing was trained."));
}

DistributedDataset MultiWorkerMirroredStrategy::experimental_distribute_dataset(const data::Dataset& dataset,
                                                                                AutoShardPolicy policy) const {
  if (policy != AutoShardPolicy::kOff)
    check_counts_agree("MultiWorkerMirroredStrategy.experimental_distribute_dataset: the datasets",
                       {{"global batches", dataset.cardinality()}});
  return DistributedDataset(dataset, replica_devices(), DistributedDataset::Mode::kSplitGlobalBatch,
                            {num_workers(), worker_index(), policy});
}

}  // namespace chorus::distribute
