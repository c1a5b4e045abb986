// The peer monitor's descriptors in a child of fork() (peer_monitor.h, "fork and exec"): a child
// has no monitor thread, so a socket it inherited would keep a dead parent's connection open and
// hide the death. Every descriptor the monitor opens is tracked here, and a pthread_atfork handler
// closes them all in the child.
#include <chorus/collective/peer_monitor/peer_monitor_internal.h>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace chorus::collective::peer_monitor_detail {
namespace {

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

}  // namespace

void track(int fd) {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, close_monitor_fds_in_child); });
  for (auto& slot : g_fork_fds) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1)) return;
  }
  // Table full: a forked child may keep this socket open; heartbeats still notice a dead parent.
}

void close_fd(int fd) {
  if (fd < 0) return;
  for (auto& slot : g_fork_fds) {
    int expected = fd + 1;
    if (slot.compare_exchange_strong(expected, 0)) break;
  }
  ::close(fd);
}

}  // namespace chorus::collective::peer_monitor_detail
