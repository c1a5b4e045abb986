#include <chorus/collective/store/store_rendezvous.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <thread>

#include <chorus/collective/store/prefix_store.h>
#include <chorus/collective/store/store_wait.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

using chorus::internal::join;
using chorus::internal::str_cat;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kSlice{100};  // how often a waiting worker looks for a published error
constexpr const char* kErrorKey = "rdzv/error";
constexpr const char* kSizeKey = "rdzv/world_size";

std::string claim_key(int rank, std::int64_t n) { return str_cat("rdzv/rank/", rank, "/", n); }

// Publishes the error for every worker ("<code> <message>"; the first one wins) and throws it here.
[[noreturn]] void fail_all(Store& s, ErrorCode code, const std::string& message) {
  try {
    if (!s.check({kErrorKey})) s.set(kErrorKey, str_cat(static_cast<int>(code), " ", message));
  } catch (const Error&) {  // the store is gone: this worker still reports its own finding
  }
  throw_error(code, message);
}
[[noreturn]] void fail_all(Store& s, const std::string& message) { fail_all(s, ErrorCode::kInvalidArgument, message); }

// Throws the error another worker published, if any.
void rethrow_published(Store& s) {
  if (!s.check({kErrorKey})) return;
  const std::string v = s.get(kErrorKey, milliseconds(0));
  const auto space = v.find(' ');
  const int code = space == std::string::npos ? 0 : std::atoi(v.substr(0, space).c_str());
  if (code == static_cast<int>(ErrorCode::kDeadlineExceeded)) throw DeadlineExceededError(v.substr(space + 1));
  CHORUS_REQUIRE(code == static_cast<int>(ErrorCode::kInvalidArgument), DataLossError, "rendezvous: key ", kErrorKey,
                 " holds \"", v.substr(0, 80), "\", which no chorus worker wrote");
  throw InvalidArgumentError(v.substr(space + 1));
}

// Waits for `keys` until `deadline`, looking for a published error every kSlice (it is rethrown
// as InvalidArgumentError). Returns the keys still missing at the deadline (empty: all there).
std::vector<std::string> wait_watching(Store& s, const std::vector<std::string>& keys, Clock::time_point deadline) {
  return collective::wait_watching(s, keys, deadline, kSlice, [&s] { rethrow_published(s); });
}

std::string who(int rank, const StoreRendezvousOptions& o) {
  return o.addresses.empty() ? str_cat("rank ", rank)
                             : str_cat("rank ", rank, " (", o.addresses[static_cast<std::size_t>(rank)], ")");
}

// Rank 0's server (when it serves) and the store of this attempt.
std::shared_ptr<Store> open_store(const StoreRendezvousOptions& o, std::shared_ptr<TcpStoreServer>* server) {
  std::shared_ptr<Store> base = o.store;
  if (!base) {
    std::string host = o.store_host;
    int port = o.store_port;
    if (o.rank == 0 && o.serve) {
      *server = std::make_shared<TcpStoreServer>(o.store_port, o.bind_host);
      port = (*server)->port();
      if (o.bind_host.empty() || o.bind_host == "0.0.0.0") host = "127.0.0.1";
      if (o.bind_host == "::") host = "::1";
    }
    base = std::make_shared<TcpStore>(host, port, TcpStoreOptions{.connect_timeout = o.timeout, .timeout = o.timeout});
  }
  return std::make_shared<PrefixStore>(str_cat("attempt/", o.attempt), std::move(base));
}

void check_options(const StoreRendezvousOptions& o) {
  CHORUS_REQUIRE(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, InvalidArgumentError,
                 "store_rendezvous: rank ", o.rank, " of world size ", o.world_size,
                 " is out of range (need 0 <= rank < world size)");
  CHORUS_REQUIRE(o.addresses.empty() || o.addresses.size() == static_cast<std::size_t>(o.world_size),
                 InvalidArgumentError, "store_rendezvous: the world size is ", o.world_size, " but the cluster lists ",
                 o.addresses.size(), " workers (", join(o.addresses), "): they must agree");
  CHORUS_REQUIRE(!o.attempt.empty() && o.timeout.count() >= 0, InvalidArgumentError,
                 "store_rendezvous: the attempt must be non-empty and the timeout non-negative");
}

void rendezvous_on(const StoreRendezvousOptions& o, Clock::time_point deadline, StoreRendezvous& out);

}  // namespace

std::string RendezvousWorker::to_string() const {
  return str_cat("rank ", rank, " (pid ", pid, " on ", host, address.empty() ? "" : ", address ", address, ")");
}

void StoreRendezvous::leave(milliseconds timeout) {
  if (size == 1) return;
  if (rank != 0) {
    // The last to leave tells rank 0; this is each worker's last call on the store.
    if (store->add("rdzv/left", 1) == size - 1) store->set("rdzv/all_left", "");
    return;
  }
  try {
    store->wait({"rdzv/all_left"}, timeout);
  } catch (const DeadlineExceededError&) {
    const std::string left = store->check({"rdzv/left"}) ? store->get("rdzv/left", milliseconds(0)) : "0";
    throw DeadlineExceededError(str_cat("rendezvous: rank 0 waited ", timeout.count(), " ms for the other ", size - 1,
                                        " workers to leave the store; ", left, " did"));
  }
}

namespace internal {

std::string format_worker(const RendezvousWorker& w, int world_size) {
  return str_cat("rank=", w.rank, "\nsize=", world_size, "\nhost=", w.host, "\npid=", w.pid, "\naddress=", w.address,
                 "\n");
}

RendezvousWorker parse_worker(const std::string& text, const std::string& key, int* world_size) {
  RendezvousWorker w;
  const char* names[] = {"rank", "size", "host", "pid", "address"};
  std::size_t at = 0;
  for (const char* name : names) {
    const std::string prefix = str_cat(name, "=");
    const std::size_t end = text.find('\n', at);
    CHORUS_REQUIRE(text.compare(at, prefix.size(), prefix) == 0 && end != std::string::npos, DataLossError,
                   "rendezvous: the record at key \"", key, "\" is not a chorus worker record (expected \"", name,
                   "=...\" at byte ", at, ")");
    const std::string value = text.substr(at + prefix.size(), end - at - prefix.size());
    at = end + 1;
    if (prefix == "host=") {
      w.host = value;
    } else if (prefix == "address=") {
      w.address = value;
    } else {
      long n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      CHORUS_REQUIRE(!value.empty() && ec == std::errc() && p == value.data() + value.size() && n >= 0, DataLossError,
                     "rendezvous: the record at key \"", key, "\" has ", name, "=\"", value,
                     "\", not a non-negative integer");
      if (prefix == "rank=") w.rank = static_cast<int>(std::min<long>(n, 1 << 30));
      if (prefix == "size=") *world_size = static_cast<int>(std::min<long>(n, 1 << 30));
      if (prefix == "pid=") w.pid = n;
    }
  }
  CHORUS_REQUIRE(at == text.size(), DataLossError, "rendezvous: the record at key \"", key, "\" has ", text.size() - at,
                 " bytes after its last field");
  return w;
}

}  // namespace internal

StoreRendezvous store_rendezvous(const StoreRendezvousOptions& o) {
  check_options(o);
  const auto deadline = Clock::now() + o.timeout;
  StoreRendezvous out;
  out.rank = o.rank;
  out.size = o.world_size;
  out.store = open_store(o, &out.server);
  try {
    rendezvous_on(o, deadline, out);
  } catch (const Error&) {
    // Rank 0's server dies with `out`: keep it a little, so that the others read the published
    // error (they look every kSlice) instead of a closed connection.
    if (out.server) std::this_thread::sleep_for(3 * kSlice);
    throw;
  }
  return out;
}

namespace {

void rendezvous_on(const StoreRendezvousOptions& o, Clock::time_point deadline, StoreRendezvous& out) {
  Store& s = *out.store;
  const RendezvousWorker me{.rank = o.rank,
                            .host = host_name_or("unknown-host"),
                            .pid = static_cast<long>(::getpid()),
                            .address = !o.address.empty()    ? o.address
                                       : o.addresses.empty() ? host_name_or("unknown-host")
                                                             : o.addresses[static_cast<std::size_t>(o.rank)]};
  // 2. Register. The first call reaches the store: nobody serving it means rank 0 is not there.
  std::int64_t n = 0;
  try {
    n = s.add(str_cat("rdzv/rank/", o.rank, "/count"), 1);
  } catch (const UnavailableError& e) {
    if (o.rank == 0 || o.store) throw;
    fail_all(s, ErrorCode::kDeadlineExceeded,
             str_cat("rendezvous of ", o.world_size, " workers: ", who(0, o),
                     ", which serves the store, did not arrive within ", o.timeout.count(), " ms: ", e.message()));
  }
  s.set(claim_key(o.rank, n), internal::format_worker(me, o.world_size));
  if (n > 1) {
    const std::string first_key = claim_key(o.rank, 1);
    int ignored = 0;
    const RendezvousWorker first = internal::parse_worker(s.get(first_key, o.timeout), first_key, &ignored);
    fail_all(s, str_cat("rendezvous: rank ", o.rank, " was claimed twice: by ", first.to_string(), " and by ",
                        me.to_string(), ". Every worker needs its own rank (RANK / TF_CONFIG's task index)"));
  }
  if (o.rank == 0) s.set(kSizeKey, std::to_string(o.world_size));
  // Every worker checks its world size against rank 0's (and so against every other's).
  if (o.rank != 0) {
    const auto missing = wait_watching(s, {kSizeKey}, deadline);
    CHORUS_REQUIRE(missing.empty(), DeadlineExceededError, "rendezvous of ", o.world_size, " workers on ", s.describe(),
                   ": ", who(0, o), " did not arrive within ", o.timeout.count(), " ms");
    const std::string theirs = s.get(kSizeKey, milliseconds(0));
    if (theirs != std::to_string(o.world_size))
      fail_all(s, str_cat("rendezvous: the world size disagrees: rank 0 says ", theirs, " but rank ", o.rank, " says ",
                          o.world_size, " (WORLD_SIZE / the TF_CONFIG cluster must be the same on every worker)"));
  }
  // 3. Everybody.
  std::vector<std::string> keys;
  for (int r = 0; r < o.world_size; ++r) keys.push_back(claim_key(r, 1));
  if (const auto missing = wait_watching(s, keys, deadline); !missing.empty()) {
    std::vector<std::string> names;
    for (int r = 0; r < o.world_size; ++r)
      if (std::find(missing.begin(), missing.end(), claim_key(r, 1)) != missing.end()) names.push_back(who(r, o));
    fail_all(s, ErrorCode::kDeadlineExceeded,
             str_cat("rendezvous of ", o.world_size, " workers on ", s.describe(), ": ",
                     join(names, {.last_separator = " and ", .max_items = 16}), " did not arrive within ",
                     o.timeout.count(), " ms (", o.world_size - static_cast<int>(names.size()), " did)"));
  }
  for (int r = 0; r < o.world_size; ++r) {
    int size = 0;
    RendezvousWorker w = internal::parse_worker(s.get(keys[static_cast<std::size_t>(r)], o.timeout),
                                                keys[static_cast<std::size_t>(r)], &size);
    CHORUS_REQUIRE(w.rank == r, DataLossError, "rendezvous: the record of rank ", r, " says rank ", w.rank);
    if (size != o.world_size)
      fail_all(s, str_cat("rendezvous: the world size disagrees: rank ", r, " says ", size, " but rank ", o.rank,
                          " says ", o.world_size));
    out.workers.push_back(std::move(w));
  }
  rethrow_published(s);
}

}  // namespace

}  // namespace chorus::collective
