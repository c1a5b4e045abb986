// Internal to collective/store/: the TCP plumbing of the store's client and server (tcp_store.h),
// over POSIX sockets: an owned descriptor, a connect that retries until a deadline, and sends and
// receives that never wait past one. Every OS call's failure names the call, the peer and errno's
// text.
//
// Thread-safety: a Socket is owned by one thread at a time; the functions keep no state.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace chorus::collective::store_socket {

using Clock = std::chrono::steady_clock;

// An owned socket descriptor: closed by the destructor. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// "host:port", or "[v6]:port" when host has a colon.
std::string endpoint(std::string_view host, int port);

// Connects to host:port, retrying (pauses of 10 ms growing to 1 s) while the server is not there —
// refused, unreachable, not resolvable yet — until `deadline`; then UnavailableError naming
// host:port, how long it tried and the last reason. The socket is non-blocking, TCP_NODELAY.
Socket connect_until(const std::string& host, int port, Clock::time_point deadline);

// A listening socket on `bind_host`:`port` (port 0: the OS picks; "" or "0.0.0.0": every IPv4
// address, "::" every address), non-blocking, SO_REUSEADDR. UnavailableError when bind or listen
// fails (e.g. the port is taken). Its port: bound_port().
Socket listen_on(const std::string& bind_host, int port);
int bound_port(const Socket& s);

// Sends every byte of `bytes` before `deadline`. UnavailableError naming `peer` when the
// connection is closed or fails; DeadlineExceededError when the peer does not read in time.
void send_all(const Socket& s, std::string_view bytes, Clock::time_point deadline, std::string_view peer);

// Waits until `s` is readable or `deadline`, then reads what is there (at most `max` bytes) into
// `out` (appended). Returns false at the deadline with nothing read. UnavailableError naming
// `peer` when the peer closed the connection or it failed.
bool recv_some(const Socket& s, std::string& out, std::size_t max, Clock::time_point deadline, std::string_view peer);

}  // namespace chorus::collective::store_socket
