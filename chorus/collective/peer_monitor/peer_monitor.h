// PeerMonitor: notices within milliseconds that another process of the job died, through the
// transport rather than the clock (what NCCL's async error handling and torchrun's heartbeats do).
//
//   PeerMonitor monitor(my_rank);                     // listens on a TCP port, starts its thread
//   publish(monitor.address());                       // e.g. all-gathered over MPI (collective/mpi/mpi.cc)
//   monitor.watch(addresses_of_every_rank);           // connects in the background
//   ...
//   if (monitor.any_lost()) throw UnavailableError(monitor.losses()[0].to_string());
//   // ~PeerMonitor: says goodbye to every peer, so this graceful exit is not taken for a death
//
// How a death is seen. Each pair of watched processes shares one TCP connection (the lower rank
// connects to the higher, proving job membership with the other's random token, which only the
// exchange gave it). When a process is killed or crashes, its kernel closes its sockets at once,
// so the peer reads end-of-file (or a reset) without having read a goodbye frame first: that peer is
// lost ("its connection closed without a goodbye"). Both ends send a heartbeat every
// heartbeat_interval; an open connection that stays silent for silence_limit (a host that lost
// power or network, a process stopped with SIGSTOP) is lost too. A peer that sent a goodbye
// (destructor, say_goodbye(), or exit() through the hook collective/mpi/mpi.cc installs) has departed:
// never a loss. _Exit, abort, a signal or an exec without goodbye count as deaths.
//
// A goodbye with an error. A process that leaves because of an error (an exception outside any
// collective: its peers would otherwise wait for it until their collective timeout) says so in
// its goodbye: set_process_failure(message) first (chorus-train and Model::fit do), or let its
// last communicator be destroyed while an exception unwinds the stack (std::uncaught_exceptions;
// the message is then unknown). Its peers record it like a loss (any_lost() turns true; losses()
// lists it with `error` set and how = "it left with an error: <message>"), so that a collective
// waiting for it fails at once instead of at its timeout. A goodbye without an error (a clean end)
// stays a departure: nothing happens until someone waits for that process in vain.
//
// What is watched. With `size` processes, each watches every other one when size - 1 <=
// max_watched; beyond that its max_watched nearest ring neighbours (rank ± 1, ± 2, ...), so a
// process holds at most max_watched sockets. The MPI communicator tells the other ranks about a
// loss it saw (notices), so unwatched ranks learn of it too.
//
// When it cannot watch. The constructor throws UnavailableError when no listening socket or thread
// can be made (the caller falls back to the clock and logs a warning). A peer that cannot be
// connected to within connect_timeout (a firewall, no common network) is unreachable: one warning,
// and the collective timeout is what notices its death. Nothing here blocks a caller for long:
// connects, reads and writes happen on the monitor's thread, non-blocking.
//
// fork and exec. Sockets are close-on-exec. In a child of fork() (which has no monitor thread),
// the monitor's descriptors are closed by a pthread_atfork handler, so a child cannot keep a dead
// parent's connections open; a child never sends goodbyes in its parent's name (the destructor
// checks the process id).
//
// Thread-safety: every member may be called from any thread. The monitor's state lives on its own
// thread; the accessors read copies under a mutex (any_lost() is one atomic load, cheap enough
// for a polling loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chorus::collective {

// Where one process's monitor listens, and how it is named in messages.
struct PeerAddress {
  int rank = -1;
  std::string host;              // its host name ("unknown-host" if none), for messages
  std::vector<std::string> ips;  // its IPv4 addresses, dotted; same-host peers try 127.0.0.1 first
  int port = 0;                  // 0: that process has no monitor (nothing to connect to)
  std::int64_t pid = 0;
  std::uint64_t token = 0;  // a connection to it must present this (random per monitor)
};

struct PeerMonitorOptions {
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds silence_limit{30000};    // no frame for this long on an open connection: lost
  std::chrono::milliseconds connect_timeout{10000};  // to reach a peer at all; then it is unreachable
  int max_watched = 64;                              // peers watched at most (ring neighbours beyond)
};

struct PeerLoss {
  int rank = -1;
  std::string host;  // "" when its address was not known (yet)
  std::int64_t pid = 0;
  std::string how;  // "its connection closed without a goodbye (killed or crashed)", ...
  // Non-empty when the process did not die but said goodbye with this error (it left failing): its
  // MPI_Finalize may be running, so a survivor still finalizes (collective/mpi/mpi.cc).
  std::string error;
  // "rank 1 (host node7, pid 4242): its connection closed without a goodbye (...)"
  std::string to_string() const;
};

class PeerMonitor {
 public:
  // Listens on an ephemeral TCP port of every IPv4 interface and starts the thread. `rank` >= 0
  // names this process in frames. Throws UnavailableError (with the OS's reason) when the socket,
  // the wake-up descriptor or the thread cannot be made; InvalidArgumentError for bad options.
  explicit PeerMonitor(int rank, const PeerMonitorOptions& options = {});
  // Says goodbye to every connected peer (only in the process that made the monitor), stops the
  // thread and closes the sockets. Blocks at most ~1 s (the thread's goodbye), never on a peer.
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  const PeerAddress& address() const;

  // The addresses of every rank of the job (index = rank; this process's own entry is skipped).
  // The ranks to watch (see above) are connected to in the background. Calling it again (a new
  // exchange) keeps connections to the same monitors and replaces those whose monitor changed.
  void watch(const std::vector<PeerAddress>& everyone);

  // True once any watched peer was lost or left with an error. Sticky: a lost peer stays lost.
  bool any_lost() const noexcept;
  // The lost peers and those that left with an error (PeerLoss::error non-empty), in the order seen.
  std::vector<PeerLoss> losses() const;
  // Ranks that said goodbye.
  std::vector<int> departed() const;
  // Ranks with an open, identified connection now.
  std::vector<int> connected() const;

  // Sends the goodbye now (idempotent): peers then take the end of this process as graceful, or as
  // leaving with process_failure() when one was recorded. The monitor stops watching afterwards.
  // Waits at most ~1 s for the thread to send it.
  void say_goodbye();

  // The ranks `rank` of `size` watches (and is watched by): all others when size - 1 <=
  // max_watched, else rank ± 1 ... ± max_watched / 2 on the ring. Symmetric. Sorted.
  static std::vector<int> ranks_to_watch(int rank, int size, int max_watched);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// This process is leaving because of an error: goodbyes said from now on (by every monitor of the
// process, also at exit) carry `message` (its first kMaxGoodbyeText = 1024 bytes), and peers waiting
// for this process in a collective raise UnavailableError naming its rank, host, pid and `message`
// at once. The first non-empty message wins (the root cause; later calls are ignored). Call it
// where the exception is caught, before communicators are destroyed if possible (a goodbye already
// said cannot be amended). Thread-safe; never throws.
void set_process_failure(const std::string& message) noexcept;
// What set_process_failure recorded; "" when nothing was.
std::string process_failure();

}  // namespace chorus::collective
