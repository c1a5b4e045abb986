// The peer monitor's thread (peer_monitor.h): one poll loop over the wake-up eventfd, the listening
// socket and every connection, woken by a caller (watch(), say_goodbye(), the destructor) or every
// kTick. Each turn applies a new watch(), starts connects, sends heartbeats, ends what timed out and
// publishes the connected ranks; a goodbye (say_goodbye() or the destructor) ends the watching.
// What one connection does is in peer_monitor_connection.cc.
#include <chorus/collective/peer_monitor/peer_monitor_internal.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <chorus/core/error.h>

namespace chorus::collective {

using internal::str_cat;
using namespace peer_monitor_detail;

void PeerMonitor::State::wake() const {
  if (::getpid() != owner) return;  // a forked child: wake_fd's number may be another file now
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd, &one, sizeof one);
}

void PeerMonitor::State::run() {
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

void PeerMonitor::State::poll_once(milliseconds timeout) {
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

void PeerMonitor::State::apply_watch(const std::vector<PeerAddress>& everyone, Clock::time_point now) {
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

void PeerMonitor::State::send_heartbeats(Clock::time_point now) {
  for (auto& [id, c] : conns) {
    if (!c.open || now - c.last_sent < options.heartbeat_interval) continue;
    if (c.out.size() < kMaxOutBytes)
      queue(
          c,
          {.kind = kHeartbeat, .rank = self.rank, .pid = static_cast<std::uint32_t>(self.pid), .token = c.peer_token});
    c.last_sent = now;
  }
}

void PeerMonitor::State::check_timeouts(Clock::time_point now) {
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
        lose(pit->second,
             str_cat("no heartbeat for ", std::chrono::duration_cast<milliseconds>(now - c.last_heard).count() / 1000.0,
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

void PeerMonitor::State::publish_connected() {
  std::vector<int> now;
  for (const auto& [rank, p] : peers)
    if (p.status == Status::kOpen) now.push_back(rank);
  std::lock_guard<std::mutex> lock(mu);
  if (now != connected) connected = std::move(now);
}

void PeerMonitor::State::leave() {
  leaving = true;
  std::string why = process_failure();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (why.empty() && unwinding)
      why =
          "an exception was propagating when its last communicator was destroyed (its message was not recorded: "
          "chorus::collective::set_process_failure)";
  }
  why.resize(std::min(why.size(), kMaxGoodbyeText));
  std::vector<std::uint64_t> lingering;
  for (auto it = conns.begin(); it != conns.end();) {
    Conn& c = it->second;
    if (c.rank >= 0 && !c.connecting && !c.goodbye) {  // open, or a handshake the peer may have opened
      queue(c, {.kind = kGoodbye,
                .rank = self.rank,
                .pid = static_cast<std::uint32_t>(self.pid),
                .token = c.peer_token,
                .echo = why.size()});
      c.out.insert(c.out.end(), why.begin(), why.end());  // the error text follows the frame
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

}  // namespace chorus::collective
