#include <chorus/distribute/cluster_resolver.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/strings.h>
#include <chorus/core/tensor.h>

#if defined(CHORUS_WITH_MPI)
#include <mpi.h>

#include <chorus/collective/mpi/mpi.h>
#endif

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace internal {

bool mpi_initialized() {
#if defined(CHORUS_WITH_MPI)
  // Both may be called at any time, from any thread (MPI-4.0 section 11.2.1).
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS) return false;
  return initialized != 0 && finalized == 0;
#else
  return false;
#endif
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs.find(job);
  return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
}

std::string ClusterSpec::to_string() const {
  std::ostringstream os;
  os << "{";
  bool first_job = true;
  for (const auto& [job, tasks] : jobs) {
    os << (first_job ? "" : ", ") << "\"" << job << "\": [";
    for (std::size_t i = 0; i < tasks.size(); ++i) os << (i ? ", " : "") << "\"" << tasks[i] << "\"";
    os << "]";
    first_job = false;
  }
  os << "}";
  return os.str();
}

ClusterResolver::ClusterResolver() { spec_.jobs["worker"] = {"localhost"}; }

std::string StoreAddress::to_string() const {
  return host.find(':') != std::string::npos ? str_cat("[", host, "]:", port) : str_cat(host, ":", port);
}

std::vector<std::string> ClusterResolver::worker_addresses() const {
  std::vector<std::string> order;
  if (source_ != "TF_CONFIG") return order;
  for (const char* job : {"chief", "worker"})
    if (auto it = spec_.jobs.find(job); it != spec_.jobs.end())
      order.insert(order.end(), it->second.begin(), it->second.end());
  return order;
}

collective::StoreRendezvousOptions store_rendezvous_options(const ClusterResolver& r,
                                                            std::chrono::milliseconds timeout) {
  CHORUS_REQUIRE(r.worker_index() >= 0, InvalidArgumentError, "store_rendezvous_options: this task (", r.task_type(),
                 ":", r.task_id(), ") is not a worker; only workers join the rendezvous");
  collective::StoreRendezvousOptions o;
  o.rank = r.worker_index();
  o.world_size = r.num_workers();
  o.attempt = std::to_string(r.restart_count());
  o.addresses = r.worker_addresses();
  o.timeout = timeout;
  if (r.num_workers() == 1 && !r.store_address()) return o;  // one process: its own store on any port
  CHORUS_REQUIRE(r.store_address().has_value(), InvalidArgumentError, "store_rendezvous_options: ", r.to_string(),
                 " names no store address (",
                 r.source() == "TF_CONFIG"
                     ? str_cat("the chief's address \"", o.addresses.empty() ? "" : o.addresses.front(),
                               "\" in TF_CONFIG has no port 1..65535")
                     : "under MPI, use the MPI backend; without it set TF_CONFIG or MASTER_ADDR/MASTER_PORT",
                 ")");
  o.store_host = r.store_address()->host;
  o.store_port = r.store_address()->port;
  o.serve = !r.agent_serves_store();
  return o;
}

std::string ClusterResolver::to_string() const {
  return str_cat("worker ", worker_index_, " of ", num_workers_, is_chief() ? " (chief)" : "", " (task ", task_type_,
                 ":", task_id_, ", local rank ", local_rank_, " of ", local_size_, ", from ", source_, ")");
}

namespace {

using chorus::internal::Json;
using chorus::internal::json_kind;
using chorus::internal::printable;

std::string host_of(const std::string& address) {
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// An integer environment variable, or nullopt when unset; InvalidArgumentError when not an int
// (naming `setter`, who sets it).
std::optional<int> env_int(const EnvLookup& env, const char* name, const char* setter = "the MPI launcher") {
  auto v = env(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(v->c_str(), &end, 10);
  CHORUS_REQUIRE(!v->empty() && end != nullptr && *end == '\0' && errno == 0 && n >= 0 && n <= 1 << 24,
                 InvalidArgumentError, "environment variable ", name, "='", *v,
                 "' is not a non-negative integer (it is set by ", setter, "; unset it or fix it)");
  return static_cast<int>(n);
}

// "host:port" or "[v6]:port" → its parts; nullopt without a port 1..65535.
std::optional<StoreAddress> parse_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return std::nullopt;
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) return std::nullopt;
  return StoreAddress{std::move(host), p};
}

}  // namespace

ClusterResolver ClusterResolver::from_tf_config(std::string_view json) {
  const Json root = chorus::internal::parse_json(json, "TF_CONFIG");
  CHORUS_REQUIRE(root.is_object(), InvalidArgumentError,
                 "TF_CONFIG must be a JSON object like {\"cluster\": {\"worker\": [\"host:port\", ...]}, \"task\": "
                 "{\"type\": \"worker\", \"index\": 0}}, got ",
                 json_kind(root));
  const auto cluster = root.find("cluster");
  CHORUS_REQUIRE(cluster != root.end() && cluster->is_object() && !cluster->empty(), InvalidArgumentError,
                 "TF_CONFIG needs a non-empty \"cluster\" object mapping job names to address "
                 "lists, e.g. {\"worker\": [\"host0:2222\", \"host1:2222\"]}");
  ClusterResolver r;
  r.source_ = "TF_CONFIG";
  r.spec_.jobs.clear();
  std::set<std::string> addresses;
  for (const auto& [job, tasks] : cluster->items()) {  // keys are unique: parse_json rejects repeats
    CHORUS_REQUIRE(tasks.is_array(), InvalidArgumentError, "TF_CONFIG: cluster job \"", printable(job),
                   "\" must be an array of \"host:port\" strings, got ", json_kind(tasks));
    auto& list = r.spec_.jobs[job];
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const Json& t = tasks[i];
      CHORUS_REQUIRE(t.is_string() && !t.get_ref<const std::string&>().empty(), InvalidArgumentError,
                     "TF_CONFIG: cluster.", printable(job), "[", i,
                     "]: the tasks of a job must be non-empty \"host:port\" strings, got ", json_kind(t));
      const std::string& address = t.get_ref<const std::string&>();
      CHORUS_REQUIRE(addresses.insert(address).second, InvalidArgumentError, "TF_CONFIG: address \"",
                     printable(address), "\" is listed twice in the cluster (every task needs its own address)");
      list.push_back(address);
    }
  }
  const int chiefs = r.spec_.num_tasks("chief");
  const int workers = r.spec_.num_tasks("worker");
  CHORUS_REQUIRE(chiefs <= 1, InvalidArgumentError, "TF_CONFIG: the cluster has ", chiefs,
                 " chief tasks; at most one is allowed");
  CHORUS_REQUIRE(chiefs + workers >= 1, InvalidArgumentError, "TF_CONFIG: the cluster ", r.spec_.to_string(),
                 " has no \"chief\" or \"worker\" job");

  const auto task = root.find("task");
  CHORUS_REQUIRE(task != root.end() && task->is_object(), InvalidArgumentError,
                 "TF_CONFIG needs a \"task\" object like {\"type\": \"worker\", \"index\": 0}");
  const auto type_it = task->find("type");
  const auto index = task->find("index");
  CHORUS_REQUIRE(type_it != task->end() && type_it->is_string(), InvalidArgumentError,
                 "TF_CONFIG: task.type must be a string naming a job of the cluster (", r.spec_.to_string(), ")");
  const std::string& type_name = type_it->get_ref<const std::string&>();
  const bool has_index = index != task->end();
  CHORUS_REQUIRE(!has_index || index->is_number(), InvalidArgumentError,
                 "TF_CONFIG: task.index must be a non-negative integer, got ", json_kind(*index));
  const double idx = has_index ? index->get<double>() : 0.0;
  CHORUS_REQUIRE(idx >= 0 && std::floor(idx) == idx, InvalidArgumentError,
                 "TF_CONFIG: task.index must be a non-negative integer, got ", idx);
  const int n_tasks = r.spec_.num_tasks(type_name);
  CHORUS_REQUIRE(r.spec_.jobs.count(type_name), InvalidArgumentError, "TF_CONFIG: task.type \"", printable(type_name),
                 "\" is not a job of the cluster ", r.spec_.to_string());
  CHORUS_REQUIRE(idx < n_tasks, InvalidArgumentError, "TF_CONFIG: task.index ", idx, " is out of range: job \"",
                 printable(type_name), "\" has ", n_tasks, " task(s) (valid: 0..", n_tasks - 1, ")");
  r.task_type_ = type_name;
  r.task_id_ = static_cast<int>(idx);
  r.num_workers_ = chiefs + workers;
  // TF's worker order: chief first, then the workers.
  std::vector<std::string> order;
  for (const char* job : {"chief", "worker"})
    if (r.spec_.jobs.count(job))
      for (const auto& a : r.spec_.jobs.at(job)) order.push_back(a);
  if (r.task_type_ == "chief")
    r.worker_index_ = 0;
  else if (r.task_type_ == "worker")
    r.worker_index_ = chiefs + r.task_id_;
  else
    r.worker_index_ = -1;
  r.store_address_ = parse_address(order.front());  // the chief (or worker 0) serves the store
  const std::string my_host = host_of(r.spec_.jobs.at(r.task_type_)[static_cast<std::size_t>(r.task_id_)]);
  r.local_rank_ = 0;
  r.local_size_ = 0;
  for (std::size_t w = 0; w < order.size(); ++w) {
    if (host_of(order[w]) != my_host) continue;
    if (r.worker_index_ >= 0 && static_cast<int>(w) < r.worker_index_) ++r.local_rank_;
    ++r.local_size_;
  }
  if (r.worker_index_ < 0) r.local_size_ = std::max(r.local_size_, 1);
  return r;
}

std::optional<ClusterResolver> ClusterResolver::from_mpi_launcher(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return env::get(n); });
  struct Names {
    const char* source;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
  };
  for (const Names& n : {Names{"Open MPI environment", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                         Names{"PMI environment", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}}) {
    const auto size = env_int(env, n.size);
    if (!size) continue;
    const auto rank = env_int(env, n.rank);
    CHORUS_REQUIRE(rank.has_value(), InvalidArgumentError, n.size, " is set (", *size, ") but ", n.rank, " is not");
    CHORUS_REQUIRE(*size >= 1 && *rank < *size, InvalidArgumentError, n.rank, "=", *rank, " must be below ", n.size,
                   "=", *size);
    const auto local_rank = env_int(env, n.local_rank);
    const auto local_size = env_int(env, n.local_size);
    ClusterResolver r;
    r.source_ = n.source;
    r.num_workers_ = *size;
    r.worker_index_ = *rank;
    r.task_id_ = *rank;
    r.local_rank_ = local_rank.value_or(0);
    r.local_size_ = local_size.value_or(local_rank ? *local_rank + 1 : 1);
    CHORUS_REQUIRE(r.local_size_ >= 1 && r.local_rank_ < r.local_size_ && r.local_size_ <= *size, InvalidArgumentError,
                   n.local_rank, "=", r.local_rank_, " and ", n.local_size, "=", r.local_size_,
                   " are inconsistent (need local_rank < local_size <= ", n.size, "=", *size, ")");
    r.spec_.jobs.clear();
    auto& workers = r.spec_.jobs["worker"];
    for (int i = 0; i < *size; ++i) workers.push_back(str_cat("mpi:rank", i));
    return r;
  }
  return std::nullopt;
}

std::optional<ClusterResolver> ClusterResolver::from_torchrun(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return env::get(n); });
  constexpr const char* kSetter = "torchrun or the job's launcher";
  const auto size = env_int(env, "WORLD_SIZE", kSetter);
  const auto rank = env_int(env, "RANK", kSetter);
  if (!size && !rank) return std::nullopt;
  CHORUS_REQUIRE(size && rank, InvalidArgumentError, size ? "WORLD_SIZE" : "RANK", " is set but ",
                 size ? "RANK" : "WORLD_SIZE", " is not: torchrun-style launchers set both (RANK=0..WORLD_SIZE-1)");
  CHORUS_REQUIRE(*size >= 1 && *rank < *size, InvalidArgumentError, "RANK=", *rank, " must be below WORLD_SIZE=", *size,
                 " (valid: 0..", *size - 1, ")");
  const auto local_rank = env_int(env, "LOCAL_RANK", kSetter);
  const auto local_size = env_int(env, "LOCAL_WORLD_SIZE", kSetter);
  ClusterResolver r;
  r.source_ = "torchrun environment";
  r.num_workers_ = *size;
  r.worker_index_ = *rank;
  r.task_id_ = *rank;
  r.local_rank_ = local_rank.value_or(0);
  r.local_size_ = local_size.value_or(local_rank ? *local_rank + 1 : 1);
  CHORUS_REQUIRE(r.local_size_ >= 1 && r.local_rank_ < r.local_size_ && r.local_size_ <= *size, InvalidArgumentError,
                 "LOCAL_RANK=", r.local_rank_, " and LOCAL_WORLD_SIZE=", r.local_size_,
                 " are inconsistent (need LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE=", *size, ")");
  r.restart_count_ = env_int(env, "TORCHELASTIC_RESTART_COUNT", kSetter).value_or(0);
  const auto agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
  r.agent_serves_store_ = agent_store && (*agent_store == "True" || *agent_store == "true" || *agent_store == "1");
  const auto addr = env("MASTER_ADDR");
  const auto port = env("MASTER_PORT");
  if (*size > 1 || addr || port) {
    CHORUS_REQUIRE(addr && !addr->empty(), InvalidArgumentError, "MASTER_ADDR is ", addr ? "empty" : "not set",
                   " but WORLD_SIZE=", *size,
                   ": it names the host of rank 0, which serves the rendezvous store (e.g. MASTER_ADDR=10.0.0.1)");
    CHORUS_REQUIRE(port.has_value(), InvalidArgumentError, "MASTER_PORT is not set but WORLD_SIZE=", *size,
                   ": it is the port rank 0 serves the rendezvous store on (e.g. MASTER_PORT=29500)");
    const auto parsed = parse_address(str_cat("x:", *port));
    CHORUS_REQUIRE(parsed.has_value(), InvalidArgumentError, "MASTER_PORT='", *port,
                   "' is not a TCP port (valid: 1..65535)");
    r.store_address_ = StoreAddress{*addr, parsed->port};
  }
  r.spec_.jobs.clear();
  auto& workers = r.spec_.jobs["worker"];
  for (int i = 0; i < *size; ++i) workers.push_back(str_cat("torchrun:rank", i));
  return r;
}

ClusterResolver ClusterResolver::from_mpi() {
#if defined(CHORUS_WITH_MPI)
  // Through the collective layer (its MPI lock, error checks and timeouts), not raw MPI calls.
  auto comm = collective::make_mpi_communicator({.validate = false, .timeout = std::chrono::seconds(60)});
  ClusterResolver r;
  r.source_ = "MPI";
  r.num_workers_ = comm->size();
  r.worker_index_ = comm->rank();
  r.task_id_ = comm->rank();
  const std::string name = host_name_or("unknown-host");
  // Host names, all-gathered as fixed 256-byte records (int64 words: a dtype every backend has).
  constexpr std::int64_t kWords = 32;
  std::vector<std::int64_t> mine(kWords, 0);
  std::memcpy(mine.data(), name.data(), std::min<std::size_t>(name.size(), kWords * 8 - 1));
  Tensor in = Tensor::from_vector<std::int64_t>(mine, {kWords}, "/cpu:0");
  Tensor all = Tensor::empty({kWords * comm->size()}, DType::kInt64, "/cpu:0");
  comm->all_gather(in, all, {.timeout = std::chrono::seconds(60)})->wait(std::chrono::seconds(60));
  const std::vector<std::int64_t> words = all.to_vector<std::int64_t>();
  std::vector<std::string> hosts;
  for (int i = 0; i < comm->size(); ++i) hosts.emplace_back(reinterpret_cast<const char*>(words.data() + i * kWords));
  r.local_rank_ = 0;
  r.local_size_ = 0;
  for (int i = 0; i < comm->size(); ++i) {
    if (hosts[static_cast<std::size_t>(i)] != hosts[static_cast<std::size_t>(comm->rank())]) continue;
    if (i < comm->rank()) ++r.local_rank_;
    ++r.local_size_;
  }
  r.spec_.jobs.clear();
  auto& workers = r.spec_.jobs["worker"];
  for (int i = 0; i < comm->size(); ++i) workers.push_back(str_cat("mpi:rank", i));
  return r;
#else
  throw UnavailableError(
      "ClusterResolver::from_mpi: this build has no MPI (configure with MPI found, "
      "CHORUS_ENABLE_MPI=ON)");
#endif
}

ClusterResolver ClusterResolver::from_environment(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return env::get(n); });
  if (auto tf_config = env("TF_CONFIG"); tf_config && !tf_config->empty()) {
    ClusterResolver r = from_tf_config(*tf_config);
    // A launcher that also sets torchrun's variables must agree with TF_CONFIG.
    const auto size = env_int(env, "WORLD_SIZE", "torchrun or the job's launcher");
    const auto rank = env_int(env, "RANK", "torchrun or the job's launcher");
    CHORUS_REQUIRE(!size || *size == r.num_workers_, InvalidArgumentError, "WORLD_SIZE=", size.value_or(0),
                   " disagrees with TF_CONFIG, whose cluster has ", r.num_workers_, " workers ", r.spec_.to_string(),
                   ": unset WORLD_SIZE or make them agree");
    CHORUS_REQUIRE(!rank || *rank == r.worker_index_, InvalidArgumentError, "RANK=", rank.value_or(0),
                   " disagrees with TF_CONFIG, whose task ", r.task_type_, ":", r.task_id_, " is worker ",
                   r.worker_index_, ": unset RANK or make them agree");
    return r;
  }
  if (auto r = from_mpi_launcher(env)) return *r;
  if (auto r = from_torchrun(env)) return *r;
#if defined(CHORUS_WITH_MPI)
  // MPI initialized by a launcher whose variables we do not know (e.g. a singleton MPI_Init).
  if (!lookup && internal::mpi_initialized()) return from_mpi();
#endif
  return ClusterResolver();
}

}  // namespace chorus::distribute
