// Internal to collective/: the pieces of the MPI backend (mpi.h) shared by its source files.
//
//   mpi.cc               MPI itself: MpiEnvironment, the process-wide MPI mutex, make_mpi_communicator
//   mpi_channel.cc       what the processes send each other: the wire forms of fingerprints and
//                        peer addresses, notices, the Channel of MPI state and its graveyard, polling
//   mpi_communicator.cc  the collectives: staging buffers, MPI calls, the fingerprint exchange, waits
//   mpi_failure.cc       how a communicator fails: timeouts, aborts, lost peers (the process's
//                        PeerMonitor) and the notices that tell the other ranks
//
// Includes <mpi.h>: only for the MPI backend's own .cc files (built with CHORUS_WITH_MPI), never
// for a public header.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <chorus/collective/call.h>
#include <chorus/collective/communicator.h>
#include <chorus/collective/deadline.h>
#include <chorus/collective/flight_record.h>
#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/collective/wire_fingerprint.h>

// Calls MPI under the process-wide mutex; an error code becomes InternalError with MPI's text.
#define CHORUS_MPI_CHECK(call)                                                                   \
  do {                                                                                           \
    std::lock_guard<std::mutex> chorus_mpi_lock_(::chorus::collective::mpi_detail::mpi_mutex()); \
    ::chorus::collective::mpi_detail::check_mpi((call), #call, __FILE__, __LINE__);              \
  } while (0)

namespace chorus::collective::mpi_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Polling: spin on MPI_Test first (measured: shorter spins made a 1 MB all-reduce ~1.7x slower than
// MPI_Iallreduce + MPI_Wait), then sleep between tests so a long wait does not take a whole core.
inline constexpr auto kSpin = std::chrono::microseconds(500);
inline constexpr auto kSleep = std::chrono::microseconds(20);
// After a timeout, how long a rank listens for the others' notices to learn who was waiting too.
inline constexpr milliseconds kGrace{200};
// After the peer monitor reported a lost peer, how long a pending request may still complete (its
// data may be in flight) before the collective fails.
inline constexpr milliseconds kLossGrace{250};
inline constexpr int kNoticeTag = 25448;  // any tag works: chorus owns the duplicated communicator

// --- mpi.cc ---------------------------------------------------------------------------------------

// Every MPI call chorus makes holds this mutex (see "Threads" in mpi.h); never held across a wait.
std::mutex& mpi_mutex();
// Throws InternalError naming `expr`, the file, the line and MPI's error string unless code is MPI_SUCCESS.
void check_mpi(int code, const char* expr, const char* file, int line);

// --- mpi_channel.cc -------------------------------------------------------------------------------

// Fingerprints travel as WireFingerprint (collective/wire_fingerprint.h: to_wire, same_call,
// describe), as in every process backend.

// What a failing rank tells the others, point-to-point on kNoticeTag.
// kLeftNotice: like kLostNotice, but every peer concerned left with an error (said goodbye): it is
// not dead, so MPI_Finalize still runs (under the watchdog).
enum NoticeKind : std::int32_t { kTimeoutNotice = 1, kAbortNotice = 2, kLostNotice = 3, kLeftNotice = 4 };
struct Notice {
  std::uint64_t comm_id;   // which communicator (guards against a message meant for a freed one)
  std::uint64_t sequence;  // the collective the sender gave up in (timeouts)
  std::int32_t kind;
  std::int32_t rank;
  char text[488];
};
static_assert(std::is_trivially_copyable_v<Notice> && sizeof(Notice) == 512);

// One process's PeerAddress as fixed-size bytes for MPI_Iallgather (port 0: no monitor there).
inline constexpr int kWireIps = 4;
struct WireAddress {
  std::int32_t rank, port;
  std::int64_t pid;
  std::uint64_t token;
  char host[64];
  char ips[kWireIps][16];
};
static_assert(std::is_trivially_copyable_v<WireAddress> && sizeof(WireAddress) == 152);
WireAddress to_wire(const PeerMonitor* monitor, int rank);
PeerAddress from_wire(const WireAddress& w);

// Buffers an MPI operation reads or writes: kept alive until it completes, or forever after a
// failure (see "Resources of a failed communicator" in mpi.h).
using Keep = std::vector<std::shared_ptr<void>>;

// The MPI state of one communicator.
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  Notice incoming{};
  MPI_Request incoming_request = MPI_REQUEST_NULL;
  std::deque<Notice> outgoing;  // deque: addresses stay valid while MPI sends from them
  std::vector<MPI_Request> outgoing_requests;
  std::vector<MPI_Request> abandoned;  // operations a failure left pending
  Keep keep;                           // and their buffers
  // True from MPI_Comm_idup until it completed: while the duplicate is half made, `comm` is an
  // MPI communicator that MPI_Finalize cannot free (Open MPI 4.1: SIGSEGV in mca_pml_ob1_del_comm).
  bool duplicating = false;
};

// A failed communicator's Channel is never destroyed: MPI may still complete its operations.
// Held through a static pointer, so leak checkers see it as reachable.
void bury(std::unique_ptr<Channel> channel);

// Set once make_mpi_communicator gave up (timeout or error) while its MPI_Comm_idup was still
// pending (issue 40: CHORUS_COLLECTIVE_TIMEOUT=1e-9 crashed 10 of 16 runs in MPI_Finalize).
extern std::atomic<bool> g_unfinished_duplicate;
// How long MpiEnvironment's destructor keeps testing such duplicates before MPI_Finalize: every
// process that also called MPI_Comm_idup (all of them, when all timed out) completes it within
// milliseconds; one that never called it never will, and MPI_Finalize is then skipped.
inline constexpr milliseconds kFinishDuplicatesWithin{5000};
// Tests the pending duplications of buried channels (MPI_Test, without taking mpi_mutex: the
// caller holds it) until all completed — true — or `within` passed, or MPI reported an error —
// false. Never throws.
bool finish_unfinished_duplicates(milliseconds within) noexcept;

// One MPI_Test; if not done and the spin phase is over, sleeps a little.
bool test_or_back_off(MPI_Request* request, Clock::time_point spin_until);

// --- mpi_failure.cc -------------------------------------------------------------------------------

// Set once this process knows that a peer process died: MPI_Finalize would wait for it forever, so
// MpiEnvironment skips it and the process can exit.
extern std::atomic<bool> g_peer_lost;
// Set once a collective of this process timed out waiting for a rank. That rank may be alive (the
// program went on and all is well) or on a host cut off the network, where MPI_Finalize would wait
// for it until TCP gives up: MpiEnvironment then gives MPI_Finalize kFinalizeAfterTimeout.
extern std::atomic<bool> g_collective_timed_out;
inline constexpr std::chrono::seconds kFinalizeAfterTimeout{10};
// Set once a collective failed because a peer left with an error (its goodbye said so): that peer
// is alive and finalizing, so MPI_Finalize runs, under the same watchdog as after a timeout.
extern std::atomic<bool> g_peer_left_failing;

// The process's monitor, started on first use; nullptr when turned off (CHORUS_PEER_MONITOR=false)
// or when it cannot start (a warning; deaths are then noticed by the timeout only).
std::shared_ptr<PeerMonitor> acquire_peer_monitor(int rank);

// --- the communicator (mpi_communicator.cc; its failure half in mpi_failure.cc) --------------------

// A call on its way: the front door's record plus when it started and must end.
struct Call : CollectiveCall {
  Clock::time_point start, deadline;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::unique_ptr<Channel> channel, std::uint64_t id, bool validate,
                  std::shared_ptr<PeerMonitor> monitor, std::vector<PeerAddress> peers);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }
  void abort(const std::string& reason) override;

 private:
  std::string prefix() const;

  // Host memory only; a block of all_gather/reduce_scatter must fit MPI's int count.
  void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const override;
  std::shared_ptr<Work> do_all_reduce(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  // float16/bfloat16 all-reduce: 16 bits on the wire, float32 arithmetic (mpi_communicator.cc).
  std::shared_ptr<Work> all_reduce_16bit(const CollectiveCall& c, const Tensor& input, const Tensor& output);
  std::shared_ptr<Work> do_broadcast(const CollectiveCall& c, const Tensor& tensor) override;
  std::shared_ptr<Work> do_reduce(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_all_gather(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_reduce_scatter(const CollectiveCall& c, const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_barrier(const CollectiveCall& c) override;

  // Drains `tensors` (null entries skipped), checks that the communicator is usable, exchanges
  // fingerprints (validation on), runs `body`, records the completed call.
  std::shared_ptr<Work> run(const CollectiveCall& c, std::initializer_list<const Tensor*> tensors,
                            const std::function<void(const Call&)>& body);
  std::string exchange_fingerprints(const Call& call);
  void wait(MPI_Request* request, const Call& call, Keep keep);

  // mpi_failure.cc
  [[noreturn]] void time_out(const Call& call, const std::optional<Notice>& cause);
  void check_usable(const Fingerprint& fp);
  std::string host_of(int rank) const;
  [[noreturn]] void lose_peer(const Fingerprint& fp, std::optional<Clock::duration> waited);
  [[noreturn]] void lost_elsewhere(const Fingerprint& fp, const Notice& n);
  void post_notice_receive();
  std::optional<Notice> poll_notice();
  void send_notices_locked(std::int32_t kind, std::uint64_t sequence, const std::string& text,
                           const std::vector<int>& skip = {});
  void fail(const std::string& failure);
  std::string failure() const;
  std::string history() const;
  // Writes this rank's flight record (collective/flight_record.h) for the failing call `fp`, begun
  // at `start` (nullopt: unknown); returns the file's path or "" (off, or not written).
  std::string record_flight(const Fingerprint& fp, std::optional<Clock::time_point> start, const char* trigger,
                            const std::string& message) const noexcept;

  std::unique_ptr<Channel> ch_;
  const std::uint64_t id_;
  const bool validate_;
  const std::shared_ptr<PeerMonitor> monitor_;  // nullptr: no monitor (deaths noticed by the timeout)
  const std::vector<PeerAddress> peers_;        // every rank's address as exchanged (hosts for messages)
  int rank_ = 0;
  int size_ = 1;
  // This rank's last completed collectives, a ring of kFlightHistory (collective/flight_record.h):
  // each call overwrites one entry (a Fingerprint assignment that reuses the entry's storage, and
  // one clock read: no lock, no allocation once the ring went round). Timeout messages show the
  // last 3, flight records all. Touched only by the thread calling the collectives.
  struct Completed {
    Fingerprint fp;
    Clock::time_point start, end;
  };
  std::array<Completed, kFlightHistory> history_;
  std::uint64_t completed_ = 0;  // calls completed so far; the newest is history_[(completed_ - 1) % size]
  mutable std::mutex state_mu_;  // failure_ and sending notices (abort() may come from any thread)
  std::atomic<bool> failed_{false};
  std::atomic<bool> lost_{false};  // failed because a peer process was lost (UnavailableError)
  std::string failure_;
};

}  // namespace chorus::collective::mpi_detail
