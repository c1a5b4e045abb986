// The TCP store's server (tcp_store.h): one thread, poll(2) over the listening socket, a wake-up
// eventfd and every connection. Requests of one connection are served in order; a get/wait whose
// keys are missing parks its connection until a set/add completes it or its deadline passes.
#include <chorus/collective/store/tcp_store.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>

#include <chorus/collective/store/store_protocol.h>
#include <chorus/collective/store/store_socket.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

using chorus::internal::str_cat;
using std::chrono::milliseconds;
using store_protocol::StoreMessage;
using store_protocol::StoreOp;
using store_protocol::StoreReply;
using store_socket::Clock;
using store_socket::Socket;

namespace {

constexpr std::size_t kRecvChunk = 64 * 1024;
constexpr milliseconds kMaxPollWait{1000};

StoreMessage reply(StoreReply kind, std::int64_t number = 0, std::vector<std::string> fields = {}) {
  return {.kind = static_cast<std::uint8_t>(kind), .number = number, .fields = std::move(fields)};
}

// add()'s reading of a stored value: a decimal int64 and nothing else.
std::optional<std::int64_t> parse_decimal(const std::string& s) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

struct Connection {
  Socket socket;
  std::string peer;  // "client 10.0.0.2:41234" for the log
  store_protocol::StoreFrameDecoder decoder;
  std::string out;                     // reply bytes not yet sent
  std::optional<StoreMessage> parked;  // a get/wait waiting for keys
  Clock::time_point deadline;          // of `parked`
};

}  // namespace

struct TcpStoreServer::Loop {
  Socket listener;
  Socket wake;  // eventfd: the destructor writes it
  std::map<int, Connection> connections;
  std::map<std::string, std::string> data;

  void run();
  void accept_all();
  // Reads what is there and serves it; false when the connection is to be closed.
  bool read_from(Connection& c);
  void serve(Connection& c);
  // The reply to `m`, or nullopt when it parks.
  std::optional<StoreMessage> answer(const StoreMessage& m);
  void retry_parked(Clock::time_point now);
  bool flush(Connection& c);
  milliseconds poll_wait() const;
};

std::optional<StoreMessage> TcpStoreServer::Loop::answer(const StoreMessage& m) {
  switch (static_cast<StoreOp>(m.kind)) {
    case StoreOp::kSet: data[m.fields[0]] = m.fields[1]; return reply(StoreReply::kOk);
    case StoreOp::kGet: {
      const auto it = data.find(m.fields[0]);
      if (it == data.end()) return std::nullopt;
      return reply(StoreReply::kValue, 0, {it->second});
    }
    case StoreOp::kAdd: {
      std::string& v = data[m.fields[0]];
      const std::optional<std::int64_t> old = v.empty() ? std::optional<std::int64_t>(0) : parse_decimal(v);
      if (!old)
        return reply(StoreReply::kError, static_cast<std::int64_t>(ErrorCode::kInvalidArgument),
                     {str_cat("store: add on key \"", m.fields[0], "\", whose value is not a decimal integer")});
      std::int64_t sum = 0;
      if (__builtin_add_overflow(*old, m.number, &sum))
        return reply(
            StoreReply::kError, static_cast<std::int64_t>(ErrorCode::kInvalidArgument),
            {str_cat("store: add of ", m.number, " to key \"", m.fields[0], "\" (", *old, ") overflows int64")});
      v = std::to_string(sum);
      return reply(StoreReply::kNumber, sum);
    }
    case StoreOp::kWait:
      for (const auto& k : m.fields)
        if (!data.count(k)) return std::nullopt;
      return reply(StoreReply::kOk);
    case StoreOp::kCheck:
      for (const auto& k : m.fields)
        if (!data.count(k)) return reply(StoreReply::kNumber, 0);
      return reply(StoreReply::kNumber, 1);
  }
  return reply(StoreReply::kError, static_cast<std::int64_t>(ErrorCode::kInternal), {"store: unknown request"});
}

void TcpStoreServer::Loop::serve(Connection& c) {
  // One request at a time: the next waits until the previous one's reply is sent (the client waits
  // for it anyway; a client that pipelines and never reads cannot grow `out` without bound).
  while (!c.parked && c.out.empty()) {
    std::optional<StoreMessage> m = c.decoder.next();  // DataLossError: caught by read_from
    if (!m) return;
    store_protocol::check_request(*m, c.peer);
    if (std::optional<StoreMessage> r = answer(*m)) {
      c.out = store_protocol::encode(*r);
      const auto op = static_cast<StoreOp>(m->kind);
      if (op == StoreOp::kSet || op == StoreOp::kAdd) retry_parked(Clock::now());
    } else {
      c.deadline = Clock::now() + milliseconds(std::min<std::int64_t>(m->number, std::int64_t{1} << 40));
      c.parked = std::move(m);
    }
  }
}

void TcpStoreServer::Loop::retry_parked(Clock::time_point now) {
  for (auto& [fd, c] : connections) {
    if (!c.parked) continue;
    if (std::optional<StoreMessage> r = answer(*c.parked)) {
      c.out = store_protocol::encode(*r);
    } else if (now >= c.deadline) {
      std::vector<std::string> missing;
      for (const auto& k : c.parked->fields)
        if (!data.count(k)) missing.push_back(k);
      c.out = store_protocol::encode(reply(StoreReply::kTimeout, 0, std::move(missing)));
    } else {
      continue;
    }
    c.parked.reset();
  }
}

bool TcpStoreServer::Loop::flush(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.socket.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

bool TcpStoreServer::Loop::read_from(Connection& c) {
  std::string bytes;
  bytes.resize(kRecvChunk);
  const ssize_t n = ::recv(c.socket.fd(), bytes.data(), bytes.size(), 0);
  if (n < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
  if (n == 0) return false;  // the client left
  bytes.resize(static_cast<std::size_t>(n));
  try {
    c.decoder.feed(bytes);
    serve(c);
  } catch (const Error& e) {  // not the protocol: this client only
    CHORUS_LOG(WARNING) << "tcp store: closing the connection of " << c.peer << ": " << e.message();
    return false;
  }
  return true;
}

void TcpStoreServer::Loop::accept_all() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    Socket s(::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!s.valid()) return;  // EAGAIN (none left) or a transient error: poll tells again
    if (connections.size() >= kMaxConnections) {
      CHORUS_LOG(WARNING) << "tcp store: " << kMaxConnections << " connections open; refusing another";
      continue;
    }
    const int fd = s.fd();
    std::string peer = str_cat("client fd ", fd);
    connections.emplace(fd, Connection{.socket = std::move(s),
                                       .peer = peer,
                                       .decoder = store_protocol::StoreFrameDecoder(peer),
                                       .out = {},
                                       .parked = std::nullopt,
                                       .deadline = {}});
  }
}

milliseconds TcpStoreServer::Loop::poll_wait() const {
  auto wait = kMaxPollWait;
  const auto now = Clock::now();
  for (const auto& [fd, c] : connections)
    if (c.parked) wait = std::min(wait, std::max(milliseconds(0), std::chrono::ceil<milliseconds>(c.deadline - now)));
  return wait;
}

void TcpStoreServer::Loop::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake.fd(), POLLIN, 0});
    fds.push_back({listener.fd(), POLLIN, 0});
    for (const auto& [fd, c] : connections)
      fds.push_back({fd, static_cast<short>(c.out.empty() ? POLLIN : POLLIN | POLLOUT), 0});
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(poll_wait().count()));
    if (rc < 0 && errno != EINTR) {
      CHORUS_LOG(ERROR) << "tcp store: poll failed: " << std::strerror(errno) << "; the server stops";
      return;
    }
    if (fds[0].revents != 0) return;  // the destructor
    if (fds[1].revents & POLLIN) accept_all();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = connections.find(fds[i].fd);
      if (it == connections.end()) continue;
      Connection& c = it->second;
      bool keep = !(fds[i].revents & (POLLERR | POLLNVAL));
      if (keep && (fds[i].revents & (POLLIN | POLLHUP))) keep = read_from(c);
      if (keep) keep = flush(c);
      if (!keep) connections.erase(it);
    }
    retry_parked(Clock::now());
    for (auto it = connections.begin(); it != connections.end();) {
      Connection& c = it->second;
      bool keep = flush(c);
      if (keep && c.out.empty() && !c.parked && c.decoder.pending() > 0) {
        try {
          serve(c);  // requests that arrived while the previous reply was going out
          keep = flush(c);
        } catch (const Error& e) {
          CHORUS_LOG(WARNING) << "tcp store: closing the connection of " << c.peer << ": " << e.message();
          keep = false;
        }
      }
      it = keep ? std::next(it) : connections.erase(it);
    }
  }
}

TcpStoreServer::TcpStoreServer(int port, const std::string& bind_host) : loop_(std::make_unique<Loop>()) {
  loop_->listener = store_socket::listen_on(bind_host, port);
  port_ = store_socket::bound_port(loop_->listener);
  loop_->wake = Socket(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  CHORUS_REQUIRE(loop_->wake.valid(), UnavailableError, "tcp store: eventfd failed: ", std::strerror(errno));
  thread_ = std::thread([loop = loop_.get()] { loop->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  const std::uint64_t one = 1;
  if (::write(loop_->wake.fd(), &one, sizeof(one)) != sizeof(one))
    CHORUS_LOG(ERROR) << "tcp store: cannot wake the server thread: " << std::strerror(errno);
  thread_.join();
}

}  // namespace chorus::collective
