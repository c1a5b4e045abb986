// The peer monitor's public face (peer_monitor.h): the constructor makes the listening socket, the
// wake-up eventfd and the thread; the destructor stops it (after the goodbye); the accessors read
// the thread's results under the mutex. The thread itself is peer_monitor_loop.cc and
// peer_monitor_connection.cc; the pieces they share are in peer_monitor_internal.h.
#include <chorus/collective/peer_monitor/peer_monitor.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <random>
#include <system_error>

#include <chorus/collective/peer_monitor/peer_monitor_internal.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>

namespace chorus::collective {
namespace {

using internal::str_cat;
using namespace peer_monitor_detail;

std::uint64_t random_token() {
  std::random_device rd;
  std::uint64_t t = 0;
  while (t == 0) t = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return t;
}

// Non-loopback IPv4 addresses of the interfaces that are up.
std::vector<std::string> local_ipv4_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a && out.size() < kMaxAddresses; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK))
      continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) out.emplace_back(text);
  }
  ::freeifaddrs(list);
  return out;
}

struct ProcessFailure {
  std::mutex mu;
  std::string message;
};
ProcessFailure& process_failure_slot() {
  static auto* slot = new ProcessFailure;  // never destroyed: goodbyes may be said at exit
  return *slot;
}

}  // namespace

void set_process_failure(const std::string& message) noexcept {
  try {
    ProcessFailure& f = process_failure_slot();
    std::lock_guard<std::mutex> lock(f.mu);
    if (f.message.empty()) f.message = message.substr(0, kMaxGoodbyeText);
  } catch (...) {  // out of memory: the goodbye stays a clean one
  }
}

std::string process_failure() {
  ProcessFailure& f = process_failure_slot();
  std::lock_guard<std::mutex> lock(f.mu);
  return f.message;
}

std::string PeerLoss::to_string() const {
  return str_cat("rank ", rank, " (host ", host.empty() ? "unknown" : host, ", pid ", pid, "): ", how);
}

std::vector<int> PeerMonitor::ranks_to_watch(int rank, int size, int max_watched) {
  std::vector<int> out;
  if (size <= 1 || rank < 0 || rank >= size) return out;
  if (size - 1 <= max_watched) {
    for (int r = 0; r < size; ++r)
      if (r != rank) out.push_back(r);
    return out;
  }
  const int half = std::max(1, max_watched / 2);
  for (int d = 1; d <= half; ++d) {
    out.push_back((rank + d) % size);
    out.push_back((rank - d + size) % size);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

PeerMonitor::PeerMonitor(int rank, const PeerMonitorOptions& options) : state_(std::make_unique<State>()) {
  CHORUS_REQUIRE(rank >= 0, InvalidArgumentError, "PeerMonitor: rank must be >= 0, got ", rank);
  CHORUS_REQUIRE(options.heartbeat_interval.count() > 0 && options.silence_limit > options.heartbeat_interval &&
                     options.connect_timeout.count() > 0 && options.max_watched >= 2,
                 InvalidArgumentError,
                 "PeerMonitor: need heartbeat_interval > 0, silence_limit > heartbeat_interval, "
                 "connect_timeout > 0 and max_watched >= 2; got ",
                 options.heartbeat_interval.count(), " ms, ", options.silence_limit.count(), " ms, ",
                 options.connect_timeout.count(), " ms, ", options.max_watched);
  State& s = *state_;
  s.options = options;
  s.owner = ::getpid();
  s.self.rank = rank;
  s.self.host = host_name_or("unknown-host");
  s.self.ips = local_ipv4_addresses();
  s.self.pid = s.owner;
  s.self.token = random_token();

  const auto fail = [&](const std::string& what) {
    const std::string message = str_cat("PeerMonitor: ", what, ": ", os_error(errno));
    close_fd(s.listen_fd);
    close_fd(s.wake_fd);
    throw UnavailableError(message);
  };
  s.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) fail("cannot create a TCP socket");
  track(s.listen_fd);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = 0;
  if (::bind(s.listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fail("cannot bind a TCP port");
  if (::listen(s.listen_fd, 128) != 0) fail("cannot listen");
  socklen_t len = sizeof sa;
  if (::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) fail("getsockname");
  s.self.port = ntohs(sa.sin_port);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) fail("cannot create an eventfd");
  track(s.wake_fd);
  try {
    s.thread = std::thread([&s] { s.run(); });
  } catch (const std::system_error& e) {
    close_fd(s.listen_fd);
    close_fd(s.wake_fd);
    throw UnavailableError(str_cat("PeerMonitor: cannot start its thread: ", e.what()));
  }
}

PeerMonitor::~PeerMonitor() {
  State& s = *state_;
  if (::getpid() != s.owner) {
    // A child of fork(): the thread does not exist here and the descriptors were closed by the
    // fork handler (their numbers may belong to something else now). Leak, never join.
    static_cast<void>(new std::thread(std::move(s.thread)));
    static_cast<void>(state_.release());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
    // The last communicator destroyed by an exception on its way up: the process is failing.
    s.unwinding = std::uncaught_exceptions() > 0;
  }
  s.wake();
  if (s.thread.joinable()) s.thread.join();
  close_fd(s.listen_fd);
  close_fd(s.wake_fd);
}

const PeerAddress& PeerMonitor::address() const { return state_->self; }

void PeerMonitor::watch(const std::vector<PeerAddress>& everyone) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->pending_watch = everyone;
  }
  state_->wake();
}

bool PeerMonitor::any_lost() const noexcept { return state_->lost.load(std::memory_order_acquire); }

std::vector<PeerLoss> PeerMonitor::losses() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->losses;
}

std::vector<int> PeerMonitor::departed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->departed;
}

std::vector<int> PeerMonitor::connected() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->connected;
}

void PeerMonitor::say_goodbye() {
  State& s = *state_;
  if (::getpid() != s.owner) return;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.stop) return;
  s.goodbye_requested = true;
  lock.unlock();
  s.wake();
  lock.lock();
  s.cv.wait_for(lock, kGoodbyeLinger + milliseconds(500), [&] { return s.goodbye_done || s.stop; });
}

}  // namespace chorus::collective
