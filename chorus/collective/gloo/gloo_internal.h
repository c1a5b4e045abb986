// Internal to collective/: the pieces of the Gloo backend (gloo.h) shared by its source files.
//
//   gloo.cc               make_gloo_communicator: arrival through the store, Gloo's full mesh
//   gloo_store.cc         GlooStore: chorus's Store (store/store.h) as Gloo's rendezvous::Store
//   gloo_wire.cc          the fingerprint as fixed-size bytes; a peer's host and pid
//   gloo_communicator.cc  the collectives: staging buffers, Gloo's algorithms, the fingerprint exchange
//   gloo_failure.cc       how a communicator fails: timeouts, aborts, lost peers, the store's record
//
// Includes Gloo's headers: only for the Gloo backend's own .cc files (built with CHORUS_WITH_GLOO),
// never for a public header.
#pragma once

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <chorus/collective/busy_poll.h>
#include <chorus/collective/call.h>
#include <chorus/collective/communicator.h>
#include <chorus/collective/flight_record.h>
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/store/store.h>
#include <chorus/collective/wire_fingerprint.h>

namespace chorus::collective::gloo_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a rank whose connection closed waits for the failure record of the rank that closed it
// (written before it closes, except after a Gloo-internal timeout: then within a store round trip).
inline constexpr milliseconds kRecordGrace{1000};

// --- gloo_store.cc ----------------------------------------------------------------------------------

// chorus's Store as Gloo's: every key gets "<prefix>/" in front; get() waits up to `timeout` for its
// key (Gloo's get does not take one); errors are chorus's (they pass through Gloo unchanged).
class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(collective::Store& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override;

 private:
  collective::Store& store_;
  const std::string prefix_;
  const milliseconds timeout_;
};

// --- gloo_wire.cc -----------------------------------------------------------------------------------

// Fingerprints travel as WireFingerprint (collective/wire_fingerprint.h: to_wire, same_call,
// describe), as in every process backend.

// Who a rank is, as it published itself at creation ("<prefix>/peer/<rank>").
struct Peer {
  std::string host = "unknown";
  long pid = 0;
  std::string address;                    // its TCP address as this rank's connection sees it, "[10.0.0.2]:40123"
  std::string to_string(int rank) const;  // "rank 1 (host node7, pid 4242, [10.0.0.2]:40123)"
};
std::string encode_peer(const Peer& p);  // "host\npid"
// Bounded by what is there: a malformed value gives host "unknown" rather than an error.
Peer decode_peer(const std::string& s);

// --- gloo_connection.cc -----------------------------------------------------------------------------

// The TCP socket of one Gloo connection, held through a descriptor of this backend's own. Gloo's
// TCP pair keeps its socket private and offers no way to wake a thread of this process that waits
// on it (closeConnections() closes the socket and leaves that thread to its timeout). shutdown(2)
// on the socket does both: Gloo's event loop reads end of file and fails every pending operation
// (the local waiter wakes), and the peer reads end of file too. The socket is found once, after
// connecting, by its local address (Pair::address()), and duplicated (close-on-exec): Gloo may close
// its descriptor at any time, and the number could then name another file, never this duplicate.
// Holding the duplicate keeps the socket open after Gloo closed its descriptor, so every failure
// path shuts it down (close_connections) and the destructor closes it. Move-only.
class Connection {
 public:
  Connection() = default;
  Connection(int fd, std::string peer_address) : fd_(fd), peer_address_(std::move(peer_address)) {}
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool found() const { return fd_ >= 0; }
  // "[10.0.0.2]:40123", "" when not found.
  const std::string& peer_address() const { return peer_address_; }
  // Shuts the socket down both ways (idempotent; nothing when not found).
  void shut_down() const noexcept;
  // Whether the peer closed or reset the connection (end of file or an error is waiting on it).
  bool peer_closed() const noexcept;

 private:
  int fd_ = -1;  // -1: not found (then this rank cannot close it early; timeouts still end waits)
  std::string peer_address_;
};
// One entry per rank (this rank's entry is empty). Never throws: a socket not found stays fd -1.
std::vector<Connection> find_connections(::gloo::Context& context) noexcept;

// --- gloo_failure.cc: a failure record as the store holds it ---------------------------------------

enum class FailureKind { kTimeout, kAbort, kLost };
struct FailureRecord {
  FailureKind kind = FailureKind::kAbort;
  std::uint64_t sequence = 0;  // the call it happened in
  int rank = -1;               // who wrote it
  std::vector<int> missing;    // timeouts: the ranks that did not arrive (or, in the data phase, report)
  std::string text;            // what it says happened
};
// "<kind> <sequence> <rank> <missing ranks, comma-separated, or ->\n<text>"
std::string encode_failure(const FailureRecord& r);
// nullopt for anything that is not a record (a store answering garbage is not believed).
std::optional<FailureRecord> decode_failure(const std::string& s);

// --- the communicator -------------------------------------------------------------------------------

// Keeps `remains` (Gloo buffers a failed call left, their memory) until the process exits, reachable
// from a static (leak checkers see them as reachable): as the MPI backend keeps a failed
// communicator's requests (mpi.h, "Resources of a failed communicator").
void bury(std::vector<std::shared_ptr<void>> remains);

struct Call : CollectiveCall {
  Clock::time_point start, deadline;
  // The time left until the deadline; zero when past it.
  milliseconds left() const;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(collective::Store& store, std::string prefix, std::shared_ptr<::gloo::Context> context,
                   std::vector<Peer> peers, bool validate, bool busy_poll);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "gloo"; }
  void abort(const std::string& reason) override;

 private:
  std::string prefix() const;

  void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const override;
  std::shared_ptr<Work> do_all_reduce(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_broadcast(const CollectiveCall& c, const Tensor& tensor) override;
  std::shared_ptr<Work> do_reduce(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_all_gather(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_reduce_scatter(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_barrier(const CollectiveCall& c) override;

  // The reduction of `n` elements of `dt` at `in` into `out` (in == out: in place) on every rank.
  void all_reduce_raw(const Call& call, DType dt, const void* in, void* out, std::size_t n);

  // Drains `tensors` (null entries skipped), checks that the communicator is usable, exchanges
  // fingerprints (validation on), runs `body`, records the completed call. A Gloo exception in any
  // of it becomes the chorus error of its cause (gloo_failure.cc).
  std::shared_ptr<Work> run(const CollectiveCall& c, std::initializer_list<const Tensor*> tensors,
                            const std::function<void(const Call&)>& body);
  // "" when every rank called the same; else the message every rank raises.
  std::string exchange_fingerprints(const Call& call);

  // gloo_failure.cc
  void check_usable(const Fingerprint& fp);
  // A Gloo exception `what` in `call`; `missing`: the ranks whose fingerprints had not come (empty
  // in the data phase); `broken`: broken_peers() when it was caught, before this rank closed anything.
  // Works out the cause, records it, closes the connections, throws.
  [[noreturn]] void fail_call(const Call& call, const std::string& what, const std::vector<int>& missing,
                              const std::vector<int>& broken);
  // `missing` empty (the data phase): asks the store which peers time out in the same call
  // (silent_in_data_phase) and names the others.
  [[noreturn]] void time_out(const Call& call, std::vector<int> missing);
  // A data-phase timeout: marks this rank stalled in `call` in the store, waits up to kRecordGrace
  // for every peer's mark, returns the peers with none (the ones cut off or stuck elsewhere).
  // {} and `store_error` ("; the store ... does not answer ...") when the store cannot be asked.
  std::vector<int> silent_in_data_phase(const Call& call, std::string* store_error) noexcept;
  [[noreturn]] void raise_recorded(const Call& call, const FailureRecord& r);
  [[noreturn]] void lose_peers(const Call& call, const std::string& what, std::vector<int> broken);
  // Writes `r` as the next failure record (errors are logged: the store may be what died).
  void record_failure(const FailureRecord& r) noexcept;
  // The first failure record, waiting up to `within` for it; nullopt when none came.
  std::optional<FailureRecord> first_failure(milliseconds within) noexcept;
  // Shuts every TCP connection of this rank down: the peers see end of file at once, and a local
  // thread waiting in Gloo wakes with an exception. Idempotent, any thread.
  void close_connections() noexcept;
  // The peers that closed or reset their connection to this rank. Only meaningful before this rank
  // shuts its own down (close_connections).
  std::vector<int> broken_peers() const;
  std::string peer_name(int rank) const;
  // Sets the failure (first one wins); returns false when one was set already.
  bool fail(const std::string& failure, FailureKind kind);
  std::string failure() const;
  std::string history() const;
  std::string record_flight(const Fingerprint& fp, std::optional<Clock::time_point> start, const char* trigger,
                            const std::string& message) const noexcept;

  collective::Store& store_;
  const std::string prefix_;
  const std::shared_ptr<::gloo::Context> context_;
  std::vector<Peer> peers_;
  std::vector<Connection> connections_;
  const bool validate_;
  const std::unique_ptr<BusyPoller> poller_;  // null: busy_poll off (gloo.h)
  const int rank_;
  const int size_;
  struct Completed {
    Fingerprint fp;
    Clock::time_point start, end;
  };
  std::array<Completed, kFlightHistory> history_;
  std::uint64_t completed_ = 0;
  mutable std::mutex state_mu_;  // failure_ and failure_kind_ (abort() may come from any thread)
  std::atomic<bool> failed_{false};
  FailureKind failure_kind_ = FailureKind::kAbort;
  std::string failure_;
};

}  // namespace chorus::collective::gloo_detail
