// The peer monitor's connections (peer_monitor.h, "How a death is seen"): how one is made (the
// lower rank connects, non-blocking, one address after another; the higher rank accepts), the
// handshake that proves job membership (peer_monitor_frame_internal.h), the frames read and sent,
// and the verdict on the peer when a connection ends: lost (closed or failed without a goodbye
// after both ends knew it open), departed (a goodbye), unreachable (it never spoke the protocol),
// or nothing (an attempt or handshake to retry). Runs on the monitor's thread only.
#include <chorus/collective/peer_monitor/peer_monitor_internal.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::collective {

using internal::str_cat;
using namespace peer_monitor_detail;

void PeerMonitor::State::start_connects(Clock::time_point now) {
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

void PeerMonitor::State::send_hello(Conn& c) {
  queue(c, {.kind = kHello,
            .rank = self.rank,
            .pid = static_cast<std::uint32_t>(self.pid),
            .token = c.peer_token,
            .echo = self.token});
}

void PeerMonitor::State::accept_all() {
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

void PeerMonitor::State::on_event(std::uint64_t id, short ev) {
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

bool PeerMonitor::State::consume_frames(std::uint64_t id) {
  for (;;) {
    auto it = conns.find(id);
    if (it == conns.end()) return false;
    Conn& c = it->second;
    if (c.in.size() < kFrameBytes) return true;
    const std::optional<Frame> f = decode(c.in);
    if (!f) {
      c.in.erase(c.in.begin(), c.in.begin() + kFrameBytes);
      stranger(id, "a frame with a bad magic number");
      return false;
    }
    // A goodbye on an identified connection may carry its error text after the frame.
    std::string text;
    if (f->kind == kGoodbye && c.rank >= 0 && f->echo > 0) {
      if (f->echo > kMaxGoodbyeText) {
        c.in.erase(c.in.begin(), c.in.begin() + kFrameBytes);
        stranger(id, "a goodbye with an oversized error text");
        return false;
      }
      const auto n = static_cast<std::size_t>(f->echo);
      if (c.in.size() < kFrameBytes + n) return true;  // the rest of the text is on its way
      text.assign(c.in.begin() + kFrameBytes, c.in.begin() + static_cast<std::ptrdiff_t>(kFrameBytes + n));
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(kFrameBytes + n));
    } else {
      c.in.erase(c.in.begin(), c.in.begin() + kFrameBytes);
    }
    if (!on_frame(id, *f, text)) return false;
  }
}

bool PeerMonitor::State::on_frame(std::uint64_t id, const Frame& f, const std::string& text) {
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
      Peer& p = pit->second;
      p.conn = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        departed.push_back(c.rank);
      }
      if (text.empty()) {
        p.status = Status::kDeparted;
      } else {  // it left failing: whoever waits for it must not wait for the timeout
        std::string error = text;
        for (char& ch : error)  // a peer's bytes: keep messages and logs printable
          if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') ch = '?';
        lose(p, str_cat("it left with an error: ", error), error);
      }
    }
    drop(id);
    return false;
  }
  return true;  // a heartbeat (or a kind a newer version sends)
}

void PeerMonitor::State::closed(std::uint64_t id, const std::string& why) {
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

void PeerMonitor::State::stranger(std::uint64_t id, const char* what) {
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

void PeerMonitor::State::drop(std::uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  close_fd(it->second.fd);
  conns.erase(it);
}

void PeerMonitor::State::lose(Peer& p, const std::string& how, const std::string& error) {
  p.status = Status::kLost;
  PeerLoss loss{p.addr.rank, p.addr.host, p.addr.pid, how, error};
  CHORUS_LOG(WARNING) << "peer monitor of rank " << self.rank << ": " << (error.empty() ? "lost " : "")
                      << loss.to_string();
  {
    std::lock_guard<std::mutex> lock(mu);
    losses.push_back(std::move(loss));
  }
  lost.store(true, std::memory_order_release);
}

void PeerMonitor::State::unreachable(Peer& p) {
  if (p.status == Status::kUnreachable) return;
  p.status = Status::kUnreachable;
  if (self.rank < p.addr.rank || p.addr.port == 0)  // the side that connects reports it
    CHORUS_LOG(WARNING) << "peer monitor of rank " << self.rank << ": cannot watch rank " << p.addr.rank << " (host "
                        << (p.addr.host.empty() ? "unknown" : p.addr.host) << ", port " << p.addr.port
                        << "): " << p.last_error << "; its death will be noticed by the collective timeout only";
}

void PeerMonitor::State::queue(Conn& c, const Frame& f) {
  const auto b = encode(f);
  c.out.insert(c.out.end(), b.begin(), b.end());
  c.last_sent = Clock::now();
  flush(c);  // an error shows up again as POLLERR/POLLHUP
}

bool PeerMonitor::State::flush(Conn& c) {
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

}  // namespace chorus::collective
