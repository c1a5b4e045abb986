// Internal to collective/: the pieces of the peer monitor (peer_monitor.h) shared by its source files.
//
//   peer_monitor.cc             the public API: the constructor (listening socket, wake-up eventfd,
//                               thread), the destructor, the accessors, say_goodbye, ranks_to_watch
//   peer_monitor_frame.cc       the wire format (peer_monitor_frame_internal.h)
//   peer_monitor_fds.cc         the monitor's descriptors, closed in a child of fork()
//   peer_monitor_loop.cc        the monitor's thread: its poll loop, watch() applied, heartbeats,
//                               timeouts, the goodbye
//   peer_monitor_connection.cc  one connection: connect or accept, the handshake, frames in and out,
//                               and the verdict on its peer when it ends (lost, departed, unreachable)
//
// Threads. PeerMonitor::State is shared by the callers of PeerMonitor and the monitor's thread:
// the callers touch only the members under "shared with the callers" (under `mu`, or `lost`, an
// atomic) and wake(); everything else, and every member function but wake(), belongs to the thread,
// which reports what it sees through those shared members and the log.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/collective/peer_monitor/peer_monitor_frame_internal.h>

namespace chorus::collective {
namespace peer_monitor_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{100};               // the thread wakes at least this often
constexpr milliseconds kAttemptTimeout{5000};    // one connect + handshake to one address
constexpr milliseconds kRetryPause{250};         // after every address of a peer failed once
constexpr milliseconds kIdentifyTimeout{10000};  // an accepted connection must say hello by then
constexpr milliseconds kGoodbyeLinger{1000};     // how long the goodbye waits for peers to close
constexpr std::size_t kMaxUnidentified = 64;     // accepted connections that have not said hello
constexpr std::size_t kMaxOutBytes = 4096;       // a peer that reads nothing gets no more heartbeats
constexpr std::size_t kMaxAddresses = 8;         // IPv4 addresses published per monitor

// --- descriptors closed in a child of fork() (see "fork and exec" in peer_monitor.h) ---
// Every descriptor the monitor opens is tracked from its creation to close_fd(), so that a child of
// fork() closes them all (a pthread_atfork handler, installed by the first track()). Lock-free,
// callable from any thread. At most 1024 are tracked at once; beyond that a descriptor stays
// untracked (a forked child may keep that socket open; heartbeats still notice a dead parent).
void track(int fd);
// Untracks first, then closes: the number cannot be reused by another thread in between.
// fd < 0: nothing.
void close_fd(int fd);

inline std::string os_error(int err) { return std::strerror(err); }

}  // namespace peer_monitor_detail

struct PeerMonitor::State {
  using Clock = peer_monitor_detail::Clock;
  using Frame = peer_monitor_detail::Frame;
  using milliseconds = std::chrono::milliseconds;

  struct Conn {
    int fd = -1;
    int rank = -1;  // the peer's rank; -1 until an accepted connection said hello
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
  pid_t owner = 0;  // the process that made the monitor (a forked child is not it)
  int listen_fd = -1;
  int wake_fd = -1;
  std::thread thread;

  // Shared with the callers, under mu.
  mutable std::mutex mu;
  std::condition_variable cv;  // goodbye_done
  std::optional<std::vector<PeerAddress>> pending_watch;
  bool stop = false;
  bool goodbye_requested = false;
  bool goodbye_done = false;
  bool unwinding = false;  // the destructor ran while an exception unwound the stack
  std::vector<PeerLoss> losses;
  std::vector<int> departed;
  std::vector<int> connected;
  std::atomic<bool> lost{false};

  // The thread's own.
  std::map<int, Peer> peers;
  std::map<std::uint64_t, Conn> conns;
  std::uint64_t next_id = 1;
  bool leaving = false;

  // ---------------------------------------------------------------- the thread (peer_monitor_loop.cc)
  // Makes the thread look at the shared members now (writes the eventfd). Any thread; nothing in a
  // forked child, where wake_fd's number may be another file.
  void wake() const;
  // The thread's body: until `stop`, applies watch(), connects, sends heartbeats, checks timeouts,
  // publishes `connected` and polls; then the goodbye (unless said already) and every connection closed.
  void run();
  // One poll of the eventfd, the listening socket and every connection, at most `timeout`.
  void poll_once(milliseconds timeout);
  // The addresses of a watch(): the ranks to watch become peers (kept if their monitor is the same).
  void apply_watch(const std::vector<PeerAddress>& everyone, Clock::time_point now);
  void send_heartbeats(Clock::time_point now);
  // Ends connections that did not identify or open in time, and loses peers silent for silence_limit.
  void check_timeouts(Clock::time_point now);
  void publish_connected();
  // The goodbye: a frame and a FIN on every open connection, then up to kGoodbyeLinger for the
  // peers to read it and close (closing with unread input would send a reset, which can destroy
  // the goodbye in the peer's receive queue before it is read). Sets goodbye_done.
  void leave();

  // ---------------------------------------------------------------- one connection (peer_monitor_connection.cc)
  // Starts a non-blocking connect to every pending peer this process connects to (the lower rank
  // connects), one address at a time; marks peers unreachable after connect_timeout.
  void start_connects(Clock::time_point now);
  void send_hello(Conn& c);
  // Accepts every waiting connection (at most kMaxUnidentified that have not said hello yet).
  void accept_all();
  // Handles poll()'s events `ev` on connection `id`: connect completion, writes, reads, the end.
  void on_event(std::uint64_t id, short ev);
  // Handles every whole frame in the connection's input (a goodbye with its error text); false
  // when the connection is gone.
  bool consume_frames(std::uint64_t id);
  // One frame: the handshake, a heartbeat or a goodbye (`text`: its error, "" for a clean end);
  // false when the connection is gone.
  bool on_frame(std::uint64_t id, const Frame& f, const std::string& text);
  // The connection ended (EOF when `why` is empty, else an error): a failed attempt, a handshake
  // to redo, or a lost peer.
  void closed(std::uint64_t id, const std::string& why);
  // A connection that does not speak the protocol (or talks about another monitor).
  void stranger(std::uint64_t id, const char* what);
  // Closes without any verdict about the peer.
  void drop(std::uint64_t id);
  // The verdicts: lost (sticky; logged, published in `losses` and `lost`), or unreachable (logged once
  // by the side that connects: its death is left to the collective timeout).
  // `error`: the peer said goodbye with this error (it left failing, it did not die).
  void lose(Peer& p, const std::string& how, const std::string& error = "");
  void unreachable(Peer& p);
  // Appends the frame to the output and sends what it can; an error shows up as POLLERR/POLLHUP.
  void queue(Conn& c, const Frame& f);
  // Sends what is queued; false on a hard error (errno set).
  static bool flush(Conn& c);
};

}  // namespace chorus::collective
