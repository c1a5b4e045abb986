#include <chorus/collective/peer_monitor.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/logging.h>

namespace chorus::collective {
namespace {

using Clock = std::chrono::steady_clock;
using internal::str_cat;
using std::chrono::milliseconds;

// The wire: fixed 32-byte frames, big-endian: magic, kind, rank, pid, token, echo.
constexpr std::uint32_t kMagic = 0x43484d31;  // "CHM1"
constexpr std::size_t kFrameBytes = 32;
enum FrameKind : std::uint32_t { kHello = 1, kHelloAck = 2, kHeartbeat = 3, kGoodbye = 4 };

constexpr milliseconds kTick{100};               // the thread wakes at least this often
constexpr milliseconds kAttemptTimeout{5000};    // one connect + handshake to one address
constexpr milliseconds kRetryPause{250};         // after every address of a peer failed once
constexpr milliseconds kIdentifyTimeout{10000};  // an accepted connection must say hello by then
constexpr milliseconds kGoodbyeLinger{1000};     // how long the goodbye waits for peers to close
constexpr std::size_t kMaxUnidentified = 64;     // accepted connections that have not said hello
constexpr std::size_t kMaxOutBytes = 4096;       // a peer that reads nothing gets no more heartbeats
constexpr std::size_t kMaxAddresses = 8;

struct Frame {
  std::uint32_t kind = 0;
  std::int32_t rank = -1;
  std::uint32_t pid = 0;
  std::uint64_t token = 0;  // the receiver's token
  std::uint64_t echo = 0;   // hello: the sender's token, for the acknowledgement
};

void put(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * (bytes - 1 - i)));
}
std::uint64_t get(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

std::array<unsigned char, kFrameBytes> encode(const Frame& f) {
  std::array<unsigned char, kFrameBytes> b{};
  put(&b[0], kMagic, 4);
  put(&b[4], f.kind, 4);
  put(&b[8], static_cast<std::uint32_t>(f.rank), 4);
  put(&b[12], f.pid, 4);
  put(&b[16], f.token, 8);
  put(&b[24], f.echo, 8);
  return b;
}

std::optional<Frame> decode(const unsigned char* b) {
  if (get(b, 4) != kMagic) return std::nullopt;
  Frame f;
  f.kind = static_cast<std::uint32_t>(get(b + 4, 4));
  f.rank = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(b + 8, 4)));
  f.pid = static_cast<std::uint32_t>(get(b + 12, 4));
  f.token = get(b + 16, 8);
  f.echo = get(b + 24, 8);
  return f;
}

// --- descriptors closed in a child of fork() (see "fork and exec" in the header) ---
// Slots hold fd + 1 (0: free). Lock-free: the child handler runs where another thread may have held
// any lock at the fork.
constexpr int kForkSlots = 1024;
std::atomic<int> g_fork_fds[kForkSlots];

void close_monitor_fds_in_child() {
  for (auto& slot : g_fork_fds) {
    const int v = slot.exchange(0);
    if (v > 0) ::close(v - 1);
  }
}

void track(int fd) {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, close_monitor_fds_in_child); });
  for (auto& slot : g_fork_fds) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1)) return;
  }
  // Table full: a forked child may keep this socket open; heartbeats still notice a dead parent.
}

// Untracks first, then closes: the number cannot be reused by another thread in between.
void close_fd(int fd) {
  if (fd < 0) return;
  for (auto& slot : g_fork_fds) {
    int expected = fd + 1;
    if (slot.compare_exchange_strong(expected, 0)) break;
  }
  ::close(fd);
}

std::string os_error(int err) { return std::strerror(err); }

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

}  // namespace

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

struct PeerMonitor::State {
  struct Conn {
    int fd = -1;
    int rank = -1;  // the peer's rank; -1 until an accepted connection said hello
    std::uint32_t pid = 0;
    std::uint64_t peer_token = 0;
    bool outgoing = false;
    bool connecting = false;  // outgoing: connect() in progress
    bool open = false;        // hello and acknowledgement done
    // Both ends know the connection is open: the connector got the acknowledgement (and says so
    // with a first heartbeat), the acceptor got a frame after the hello. Only the end of a
    // confirmed connection can be a death; an unconfirmed one is a handshake that did not finish
    // (the connector gave up on a slow acknowledgement, or its monitor closed meanwhile).
    bool confirmed = false;
    bool goodbye = false;  // the peer said goodbye
    Clock::time_point since, last_heard, last_sent;
    std::vector<unsigned char> in;
    std::vector<unsigned char> out;
  };
  enum class Status { kPending, kOpen, kDeparted, kLost, kUnreachable };
  struct Peer {
    PeerAddress addr;
    Status status = Status::kPending;
    std::uint64_t conn = 0;  // the current connection's id, 0: none
    std::size_t next_ip = 0;
    Clock::time_point first_try, next_try;
    std::string last_error;
  };

  PeerMonitorOptions options;
  PeerAddress self;
  pid_t owner = 0;
  int listen_fd = -1;
  int wake_fd = -1;
  std::thread thread;

  // Shared with the callers, under mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::optional<std::vector<PeerAddress>> pending_watch;
  bool stop = false;
  bool goodbye_requested = false;
  bool goodbye_done = false;
  std::vector<PeerLoss> losses;
  std::vector<int> departed;
  std::vector<int> connected;
  std::atomic<bool> lost{false};

  // The thread's own.
  std::map<int, Peer> peers;
  std::map<std::uint64_t, Conn> conns;
  std::uint64_t next_id = 1;
  bool leaving = false;

  void wake() const {
    if (::getpid() != owner) return;  // a forked child: wake_fd's number may be another file now
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd, &one, sizeof one);
  }

  // ---------------------------------------------------------------- the thread
  void run() {
    auto last_loop = Clock::now();
    for (;;) {
      std::optional<std::vector<PeerAddress>> watch_now;
      bool goodbye_now = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) break;
        watch_now.swap(pending_watch);
        goodbye_now = goodbye_requested && !leaving;
      }
      const auto now = Clock::now();
      if (goodbye_now) {
        leave();
        continue;
      }
      if (watch_now && !leaving) apply_watch(*watch_now, now);
      // This thread was itself stalled (the machine swapped, the process was stopped): silence
      // measured across the stall says nothing about the peers.
      if (now - last_loop > options.silence_limit / 2)
        for (auto& [id, c] : conns) c.last_heard = now;
      last_loop = now;
      if (!leaving) {
        start_connects(now);
        send_heartbeats(now);
        check_timeouts(now);
      }
      publish_connected();
      poll_once(kTick);
    }
    // Stopped by the destructor: a goodbye unless one was said already.
    if (!leaving) leave();
    for (auto& [id, c] : conns) close_fd(c.fd);
    conns.clear();
  }

  void poll_once(milliseconds timeout) {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> ids;
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_fd, static_cast<short>(leaving ? 0 : POLLIN), 0});
    for (auto& [id, c] : conns) {
      short events = POLLIN;
      if (c.connecting || !c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (n <= 0) return;  // timeout, or EINTR: the loop comes back
    if (fds[0].revents & POLLIN) {
      std::uint64_t v;
      while (::read(wake_fd, &v, sizeof v) > 0) {
      }
    }
    if (fds[1].revents & POLLIN) accept_all();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (ev) on_event(ids[i], ev);
    }
  }

  // ---------------------------------------------------------------- watching
  void apply_watch(const std::vector<PeerAddress>& everyone, Clock::time_point now) {
    const int size = static_cast<int>(everyone.size());
    for (int r : ranks_to_watch(self.rank, size, options.max_watched)) {
      const PeerAddress& a = everyone[static_cast<std::size_t>(r)];
      auto it = peers.find(r);
      if (it != peers.end()) {
        Peer& p = it->second;
        const bool same = p.addr.pid == a.pid && (p.addr.port == a.port || p.addr.port == 0);
        if (p.status == Status::kLost) continue;  // sticky
        if (same && p.status != Status::kDeparted && p.status != Status::kUnreachable) {
          p.addr = a;  // fills in what an early hello could not tell (host, addresses)
          continue;
        }
        if (p.conn) drop(p.conn);
      }
      Peer p;
      p.addr = a;
      p.first_try = p.next_try = now;
      if (a.port == 0) {
        p.status = Status::kUnreachable;
        p.last_error = "that process has no peer monitor";
      }
      peers[r] = p;
    }
  }

  void start_connects(Clock::time_point now) {
    for (auto& [rank, p] : peers) {
      if (p.status != Status::kPending || p.conn != 0 || now < p.next_try) continue;
      if (now - p.first_try > options.connect_timeout + (self.rank > rank ? kAttemptTimeout : milliseconds(0))) {
        unreachable(p);
        continue;
      }
      if (self.rank > rank) continue;  // the lower rank connects
      std::vector<std::string> candidates;
      if (p.addr.host == self.host) candidates.push_back("127.0.0.1");
      candidates.insert(candidates.end(), p.addr.ips.begin(), p.addr.ips.end());
      if (p.next_ip >= candidates.size()) {
        p.next_ip = 0;
        p.next_try = now + kRetryPause;
        continue;
      }
      const std::string ip = candidates[p.next_ip++];
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(static_cast<std::uint16_t>(p.addr.port));
      if (::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) {
        p.last_error = str_cat("'", ip, "' is not an IPv4 address");
        continue;
      }
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        p.last_error = str_cat("socket: ", os_error(errno));
        p.next_try = now + kRetryPause;
        continue;
      }
      track(fd);
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
      if (rc != 0 && errno != EINPROGRESS) {
        p.last_error = str_cat("connect to ", ip, ":", p.addr.port, ": ", os_error(errno));
        close_fd(fd);
        continue;
      }
      Conn c;
      c.fd = fd;
      c.rank = rank;
      c.pid = static_cast<std::uint32_t>(p.addr.pid);
      c.peer_token = p.addr.token;
      c.outgoing = true;
      c.connecting = rc != 0;
      c.since = c.last_heard = c.last_sent = now;
      const std::uint64_t id = next_id++;
      p.conn = id;
      p.last_error = str_cat("connect to ", ip, ":", p.addr.port, ": no answer");
      auto& stored = conns.emplace(id, std::move(c)).first->second;
      if (!stored.connecting) send_hello(stored);
    }
  }

  void send_hello(Conn& c) {
    queue(c, {.kind = kHello,
              .rank = self.rank,
              .pid = static_cast<std::uint32_t>(self.pid),
              .token = c.peer_token,
              .echo = self.token});
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or an error the next poll will show again
      track(fd);
      std::size_t unidentified = 0;
      for (auto& [id, c] : conns) unidentified += c.rank < 0 ? 1 : 0;
      if (unidentified >= kMaxUnidentified) {  // someone floods the port: keep the known peers working
        close_fd(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Conn c;
      c.fd = fd;
      c.since = c.last_heard = c.last_sent = Clock::now();
      conns.emplace(next_id++, std::move(c));
    }
  }

  void on_event(std::uint64_t id, short ev) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = it->second;
    if (c.connecting) {
      if (!(ev & (POLLOUT | POLLERR | POLLHUP))) return;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return closed(id, os_error(err));
      c.connecting = false;
      c.since = Clock::now();
      send_hello(c);
      return;
    }
    if (ev & POLLOUT) {
      if (!flush(c)) return closed(id, os_error(errno));
    }
    if (ev & (POLLIN | POLLHUP | POLLERR)) {
      unsigned char buf[4096];
      for (;;) {
        const ssize_t n = ::read(c.fd, buf, sizeof buf);
        if (n > 0) {
          c.in.insert(c.in.end(), buf, buf + n);
          // Frames are handled as they come, so a peer that floods the port cannot grow `in`.
          if (!consume_frames(id)) return;
          continue;
        }
        const int err = errno;
        // Frames that arrived before the end are read first: a goodbye followed by the close.
        if (!consume_frames(id)) return;
        if (n == 0) return closed(id, "");
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        if (err == EINTR) continue;
        return closed(id, os_error(err));
      }
      consume_frames(id);
    }
  }

  // Handles every whole frame in the connection's input; false when the connection is gone.
  bool consume_frames(std::uint64_t id) {
    for (;;) {
      auto it = conns.find(id);
      if (it == conns.end()) return false;
      Conn& c = it->second;
      if (c.in.size() < kFrameBytes) return true;
      const std::optional<Frame> f = decode(c.in.data());
      c.in.erase(c.in.begin(), c.in.begin() + kFrameBytes);
      if (!f) {
        stranger(id, "a frame with a bad magic number");
        return false;
      }
      if (!on_frame(id, *f)) return false;
    }
  }

  bool on_frame(std::uint64_t id, const Frame& f) {
    Conn& c = conns.at(id);
    const auto now = Clock::now();
    if (c.rank < 0) {  // an accepted connection: it must prove membership first
      if (f.kind != kHello || f.token != self.token || f.rank < 0 || f.rank == self.rank) {
        stranger(id, "no valid hello");
        return false;
      }
      auto pit = peers.find(f.rank);
      if (pit != peers.end() && pit->second.status == Status::kLost) {
        drop(id);
        return false;
      }
      c.rank = f.rank;
      c.pid = f.pid;
      c.peer_token = f.echo;
      c.open = true;
      c.last_heard = now;
      queue(c, {.kind = kHelloAck, .rank = self.rank, .pid = static_cast<std::uint32_t>(self.pid), .token = f.echo});
      Peer& p = peers[f.rank];
      if (p.conn && p.conn != id) drop(p.conn);
      if (p.addr.rank < 0) {  // the hello came before watch(): the address follows
        p.addr.rank = f.rank;
        p.first_try = p.next_try = now;
      }
      p.addr.pid = f.pid;
      p.status = Status::kOpen;
      p.conn = id;
      return true;
    }
    if (f.token != self.token || f.rank != c.rank) {
      stranger(id, "a frame for another monitor");
      return false;
    }
    c.last_heard = now;
    if (!c.open) {  // our hello's acknowledgement
      if (f.kind != kHelloAck) {
        stranger(id, "no acknowledgement of the hello");
        return false;
      }
      c.open = true;
      c.confirmed = true;
      queue(c, {.kind = kHeartbeat,
                .rank = self.rank,
                .pid = static_cast<std::uint32_t>(self.pid),
                .token = c.peer_token});  // tells the acceptor that the handshake completed
      Peer& p = peers[c.rank];
      p.status = Status::kOpen;
      p.last_error.clear();
      return true;
    }
    c.confirmed = true;
    if (f.kind == kGoodbye) {
      c.goodbye = true;
      auto pit = peers.find(c.rank);
      if (pit != peers.end() && pit->second.conn == id) {
        pit->second.status = Status::kDeparted;
        pit->second.conn = 0;
        std::lock_guard<std::mutex> lock(mu);
        departed.push_back(c.rank);
      }
      drop(id);
      return false;
    }
    return true;  // a heartbeat (or a kind a newer version sends)
  }

  // The connection ended (EOF when `why` is empty, else an error).
  void closed(std::uint64_t id, const std::string& why) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn c = std::move(it->second);
    conns.erase(it);
    close_fd(c.fd);
    if (c.rank < 0) return;
    auto pit = peers.find(c.rank);
    if (pit == peers.end() || pit->second.conn != id) return;  // replaced meanwhile
    Peer& p = pit->second;
    p.conn = 0;
    if (!c.open) {  // an attempt to connect failed: the next address, or a retry
      p.last_error = str_cat("rank ", c.rank, "'s monitor: ", why.empty() ? "closed before the handshake" : why);
      return;
    }
    if (c.goodbye || leaving) return;
    if (!c.confirmed) {  // a handshake that did not finish: wait for (or make) another attempt
      p.status = Status::kPending;
      p.first_try = p.next_try = Clock::now();
      return;
    }
    lose(p, why.empty() ? "its connection closed without a goodbye (the process was killed, crashed or exited "
                          "without closing chorus)"
                        : str_cat("its connection failed (", why,
                                  ") without a goodbye (the process was killed or "
                                  "crashed, or its host went away)"));
  }

  // A connection that does not speak the protocol (or talks about another monitor).
  void stranger(std::uint64_t id, const char* what) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    const int rank = it->second.rank;
    CHORUS_LOG(DEBUG) << "peer monitor of rank " << self.rank << ": dropping a connection"
                      << (rank >= 0 ? str_cat(" from rank ", rank) : std::string()) << ": " << what;
    if (rank >= 0) {
      auto pit = peers.find(rank);
      if (pit != peers.end() && pit->second.conn == id) {
        pit->second.conn = 0;
        if (it->second.open)
          unreachable(pit->second);  // never a death: we cannot tell
        else
          pit->second.last_error = what;
      }
    }
    drop(id);
  }

  // Closes without any verdict about the peer.
  void drop(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    close_fd(it->second.fd);
    conns.erase(it);
  }

  void lose(Peer& p, const std::string& how) {
    p.status = Status::kLost;
    PeerLoss loss{p.addr.rank, p.addr.host, p.addr.pid, how};
    CHORUS_LOG(WARNING) << "peer monitor of rank " << self.rank << ": lost " << loss.to_string();
    {
      std::lock_guard<std::mutex> lock(mu);
      losses.push_back(std::move(loss));
    }
    lost.store(true, std::memory_order_release);
  }

  void unreachable(Peer& p) {
    if (p.status == Status::kUnreachable) return;
    p.status = Status::kUnreachable;
    if (self.rank < p.addr.rank || p.addr.port == 0)  // the side that connects reports it
      CHORUS_LOG(WARNING) << "peer monitor of rank " << self.rank << ": cannot watch rank " << p.addr.rank << " (host "
                          << (p.addr.host.empty() ? "unknown" : p.addr.host) << ", port " << p.addr.port
                          << "): " << p.last_error << "; its death will be noticed by the collective timeout only";
  }

  void send_heartbeats(Clock::time_point now) {
    for (auto& [id, c] : conns) {
      if (!c.open || now - c.last_sent < options.heartbeat_interval) continue;
      if (c.out.size() < kMaxOutBytes)
        queue(c, {.kind = kHeartbeat,
                  .rank = self.rank,
                  .pid = static_cast<std::uint32_t>(self.pid),
                  .token = c.peer_token});
      c.last_sent = now;
    }
  }

  void check_timeouts(Clock::time_point now) {
    std::vector<std::pair<std::uint64_t, std::string>> ended;
    for (auto& [id, c] : conns) {
      if (c.rank < 0 && now - c.since > kIdentifyTimeout) {
        ended.emplace_back(id, "");
      } else if (c.outgoing && !c.open && now - c.since > kAttemptTimeout) {
        ended.emplace_back(id, "timed out");
      } else if (c.open && now - c.last_heard > options.silence_limit) {
        auto pit = peers.find(c.rank);
        if (pit != peers.end() && pit->second.conn == id && pit->second.status == Status::kOpen) {
          pit->second.conn = 0;
          lose(pit->second, str_cat("no heartbeat for ",
                                    std::chrono::duration_cast<milliseconds>(now - c.last_heard).count() / 1000.0,
                                    " s (its host is down or unreachable, or the process is stopped)"));
        }
        ended.emplace_back(id, "");
      }
    }
    for (const auto& [id, why] : ended) {
      auto it = conns.find(id);
      if (it == conns.end()) continue;
      if (it->second.rank < 0 || !it->second.open)
        closed(id, why.empty() ? "timed out" : why);
      else
        drop(id);
    }
  }

  void publish_connected() {
    std::vector<int> now;
    for (const auto& [rank, p] : peers)
      if (p.status == Status::kOpen) now.push_back(rank);
    std::lock_guard<std::mutex> lock(mu);
    if (now != connected) connected = std::move(now);
  }

  void queue(Conn& c, const Frame& f) {
    const auto b = encode(f);
    c.out.insert(c.out.end(), b.begin(), b.end());
    c.last_sent = Clock::now();
    flush(c);  // an error shows up again as POLLERR/POLLHUP
  }

  // Sends what is queued; false on a hard error (errno set).
  static bool flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(c.out.begin(), c.out.begin() + n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    return true;
  }

  // The goodbye: a frame and a FIN on every open connection, then up to kGoodbyeLinger for the
  // peers to read it and close (closing with unread input would send a reset, which can destroy
  // the goodbye in the peer's receive queue before it is read).
  void leave() {
    leaving = true;
    std::vector<std::uint64_t> lingering;
    for (auto it = conns.begin(); it != conns.end();) {
      Conn& c = it->second;
      if (c.rank >= 0 && !c.connecting && !c.goodbye) {  // open, or a handshake the peer may have opened
        queue(
            c,
            {.kind = kGoodbye, .rank = self.rank, .pid = static_cast<std::uint32_t>(self.pid), .token = c.peer_token});
        flush(c);
        ::shutdown(c.fd, SHUT_WR);
        lingering.push_back(it->first);
        ++it;
      } else {
        close_fd(c.fd);
        it = conns.erase(it);
      }
    }
    const auto until = Clock::now() + kGoodbyeLinger;
    while (!lingering.empty() && Clock::now() < until) {
      std::vector<pollfd> fds;
      for (auto id : lingering) fds.push_back({conns.at(id).fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) break;
      std::vector<std::uint64_t> still;
      for (std::size_t i = 0; i < lingering.size(); ++i) {
        bool done = false;
        if (fds[i].revents) {
          unsigned char buf[4096];
          ssize_t n;
          while ((n = ::read(fds[i].fd, buf, sizeof buf)) > 0) {
          }
          done = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (done)
          drop(lingering[i]);
        else
          still.push_back(lingering[i]);
      }
      lingering.swap(still);
    }
    for (auto id : lingering) drop(id);
    {
      std::lock_guard<std::mutex> lock(mu);
      goodbye_done = true;
      connected.clear();
    }
    cv.notify_all();
  }
};

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
