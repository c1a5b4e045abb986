// The TCP sockets of a Gloo context's connections, found by their local addresses and duplicated,
// so that this backend can shut them down and see a peer's end of file (gloo_internal.h, Connection).
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/core/logging.h>

namespace chorus::collective::gloo_detail {

namespace {

// Same family, address and port (what identifies a connected socket's local end).
bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && std::memcmp(&x.sin_addr, &y.sin_addr, sizeof x.sin_addr) == 0;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// The connected sockets of this process: (fd, local address). getsockname first: it fails on
// anything that is not a socket (no fstat of descriptors other threads may be closing).
std::vector<std::pair<int, sockaddr_storage>> connected_sockets() {
  std::vector<std::pair<int, sockaddr_storage>> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    out.emplace_back(static_cast<int>(fd), local);
  }
  ::closedir(dir);
  return out;
}

// A close-on-exec duplicate of `fd` if it is (still) the connected socket whose local end is `self`.
int duplicate_if(int fd, const sockaddr_storage& self) {
  const int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0) return -1;
  sockaddr_storage local{}, peer{};
  socklen_t len = sizeof local, plen = sizeof peer;
  if (::getsockname(d, reinterpret_cast<sockaddr*>(&local), &len) == 0 && same_endpoint(local, self) &&
      ::getpeername(d, reinterpret_cast<sockaddr*>(&peer), &plen) == 0)
    return d;
  ::close(d);
  return -1;
}

}  // namespace

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

Connection::Connection(Connection&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), peer_address_(std::move(other.peer_address_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    peer_address_ = std::move(other.peer_address_);
  }
  return *this;
}

void Connection::shut_down() const noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool Connection::peer_closed() const noexcept {
  if (fd_ < 0) return false;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::vector<Connection> find_connections(::gloo::Context& context) noexcept {
  std::vector<Connection> out(static_cast<std::size_t>(context.size));
  try {
    const auto sockets = connected_sockets();
    for (int r = 0; r < context.size; ++r) {
      if (r == context.rank) continue;
      auto& pair = context.getPair(r);
      const auto* self = pair ? dynamic_cast<const ::gloo::transport::tcp::Address*>(&pair->address()) : nullptr;
      if (self == nullptr) continue;
      for (const auto& [fd, local] : sockets) {
        if (!same_endpoint(local, self->getSockaddr())) continue;
        const int d = duplicate_if(fd, self->getSockaddr());
        if (d < 0) continue;
        out[static_cast<std::size_t>(r)] = Connection(d, ::gloo::transport::tcp::Address::fromPeerName(d).str());
        break;
      }
      if (!out[static_cast<std::size_t>(r)].found())
        CHORUS_LOG(WARNING) << "gloo: rank " << context.rank << " did not find its socket to rank " << r
                            << ": abort() and failures reach that peer only through the timeout";
    }
  } catch (const std::exception& e) {
    CHORUS_LOG(WARNING) << "gloo: rank " << context.rank << " could not find its sockets: " << e.what();
  }
  return out;
}

}  // namespace chorus::collective::gloo_detail
