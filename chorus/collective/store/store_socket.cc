#include <chorus/collective/store/store_socket.h>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective::store_socket {

using chorus::internal::str_cat;
using std::chrono::milliseconds;

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string endpoint(std::string_view host, int port) {
  return host.find(':') != std::string_view::npos ? str_cat("[", host, "]:", port) : str_cat(host, ":", port);
}

namespace {

// Milliseconds until `deadline` for poll(2): 0 when past, capped so it fits an int.
int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  CHORUS_REQUIRE(flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, UnavailableError,
                 "store: fcntl(O_NONBLOCK) failed: ", std::strerror(errno));
}

// One attempt: each address getaddrinfo gives, until one connects before `deadline`. The empty
// socket and the reason when none does.
Socket try_connect(const std::string& host, int port, Clock::time_point deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    *why = str_cat("cannot resolve \"", host, "\": ", ::gai_strerror(rc));
    return Socket();
  }
  Socket result;
  for (addrinfo* a = list; a != nullptr && !result.valid(); a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      *why = str_cat("socket: ", std::strerror(errno));
      continue;
    }
    set_nonblocking(s.fd());
    int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      rc = ::poll(&p, 1, std::min(poll_ms(deadline), 5000));
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (rc == 1) ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc != 0) {
      *why = str_cat("connect: ", std::strerror(errno));
      continue;
    }
    const int one = 1;
    ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    result = std::move(s);
  }
  ::freeaddrinfo(list);
  return result;
}

}  // namespace

Socket connect_until(const std::string& host, int port, Clock::time_point deadline) {
  const auto start = Clock::now();
  milliseconds pause{10};
  std::string why = "no attempt (the timeout was 0)";
  while (true) {
    if (Socket s = try_connect(host, port, deadline, &why); s.valid()) return s;
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, milliseconds(1000));
  }
  throw UnavailableError(str_cat("store: cannot reach the tcp store at ", endpoint(host, port), " (tried for ",
                                 std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(),
                                 " ms; last: ", why,
                                 "): is its server (rank 0 / the chief) running and the address "
                                 "and port right?"));
}

Socket listen_on(const std::string& bind_host, int port) {
  CHORUS_REQUIRE(port >= 0 && port <= 65535, InvalidArgumentError, "store: port ", port,
                 " is not a TCP port (0..65535)");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const char* node = bind_host.empty() ? nullptr : bind_host.c_str();
  if (const int rc = ::getaddrinfo(node, service.c_str(), &hints, &list); rc != 0)
    throw UnavailableError(
        str_cat("store: cannot resolve the address to serve on \"", bind_host, "\": ", ::gai_strerror(rc)));
  std::string why;
  Socket result;
  for (addrinfo* a = list; a != nullptr && !result.valid(); a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    const int one = 1;
    if (!s.valid() || ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        ::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), 512) != 0) {
      why = std::strerror(errno);
      continue;
    }
    set_nonblocking(s.fd());
    result = std::move(s);
  }
  ::freeaddrinfo(list);
  CHORUS_REQUIRE(result.valid(), UnavailableError, "store: cannot serve on ", endpoint(bind_host, port), ": ", why,
                 port != 0 ? " (is the port taken? port 0 lets the OS choose)" : "");
  return result;
}

int bound_port(const Socket& s) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  CHORUS_REQUIRE(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0, UnavailableError,
                 "store: getsockname failed: ", std::strerror(errno));
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void send_all(const Socket& s, std::string_view bytes, Clock::time_point deadline, std::string_view peer) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(s.fd(), bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n > 0) {
      at += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    CHORUS_REQUIRE(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), UnavailableError, "store: the connection to ",
                   peer, " failed while sending: ", n < 0 ? std::strerror(errno) : "closed");
    pollfd p{s.fd(), POLLOUT, 0};
    const int rc = ::poll(&p, 1, poll_ms(deadline));
    CHORUS_REQUIRE(rc != 0, DeadlineExceededError, "store: ", peer, " did not take a request of ", bytes.size(),
                   " bytes before the deadline (", at, " sent)");
    CHORUS_REQUIRE(rc > 0 || errno == EINTR, UnavailableError, "store: poll failed: ", std::strerror(errno));
  }
}

bool recv_some(const Socket& s, std::string& out, std::size_t max, Clock::time_point deadline, std::string_view peer) {
  while (true) {
    pollfd p{s.fd(), POLLIN, 0};
    const int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc == 0) return false;
    if (rc < 0) {
      CHORUS_REQUIRE(errno == EINTR, UnavailableError, "store: poll failed: ", std::strerror(errno));
      continue;
    }
    const std::size_t old = out.size();
    out.resize(old + max);
    const ssize_t n = ::recv(s.fd(), out.data() + old, max, 0);
    out.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) return true;
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    throw UnavailableError(str_cat(
        "store: ", peer, n == 0 ? " closed the connection" : " connection failed: ", n == 0 ? "" : std::strerror(errno),
        " (the store's server stopped or the network failed)"));
  }
}

}  // namespace chorus::collective::store_socket
