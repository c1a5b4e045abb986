// The TCP sockets of a Gloo context's connections, found by their local addresses, so that this
// backend can shut them down (gloo_internal.h, Connection).
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>

#include <cstring>

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

// The open sockets of this process: (fd, local address), connected ones only.
std::vector<std::pair<int, sockaddr_storage>> connected_sockets() {
  std::vector<std::pair<int, sockaddr_storage>> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t len = sizeof local, plen = sizeof peer;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    out.emplace_back(static_cast<int>(fd), local);
  }
  ::closedir(dir);
  return out;
}

}  // namespace

bool Connection::is_open() const {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<unsigned long>(st.st_dev) == device &&
         static_cast<unsigned long>(st.st_ino) == inode;
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
        struct stat st {};
        if (::fstat(fd, &st) != 0) break;
        Connection& c = out[static_cast<std::size_t>(r)];
        c.fd = fd;
        c.device = static_cast<unsigned long>(st.st_dev);
        c.inode = static_cast<unsigned long>(st.st_ino);
        c.peer_address = ::gloo::transport::tcp::Address::fromPeerName(fd).str();
        break;
      }
      if (out[static_cast<std::size_t>(r)].fd < 0)
        CHORUS_LOG(WARNING) << "gloo: rank " << context.rank << " did not find its socket to rank " << r
                            << ": abort() and failures reach that peer only through the timeout";
    }
  } catch (const std::exception& e) {
    CHORUS_LOG(WARNING) << "gloo: rank " << context.rank << " could not find its sockets: " << e.what();
  }
  return out;
}

}  // namespace chorus::collective::gloo_detail
