// How an MPI communicator fails (mpi.h, "Failure"): a timeout (the rank that gives up tells the
// others and learns who else was waiting), an abort, a lost peer process (seen by this process's
// PeerMonitor, or told by another rank) — and the notice channel that carries the news, so that
// every rank fails with a message naming the cause instead of waiting. Internal (mpi_internal.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <chorus/collective/mpi/mpi_internal.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::collective::mpi_detail {

using internal::str_cat;

// --- the peer monitor (collective/peer_monitor/peer_monitor.h): one per process, shared by its MPI communicators ---

std::atomic<bool> g_peer_lost{false};
std::atomic<bool> g_collective_timed_out{false};
std::atomic<bool> g_peer_left_failing{false};

namespace {

struct MonitorSlot {
  std::mutex mu;
  std::weak_ptr<PeerMonitor> current;
};
MonitorSlot& monitor_slot() {
  static auto* slot = new MonitorSlot;  // never destroyed: the exit hook may run after static destructors
  return *slot;
}

// exit() (not _Exit, abort or a signal) is a graceful end: tell the peers, so they do not take it
// for a death while communicators are still alive (a program that never destroys them).
void goodbye_at_exit() {
  std::shared_ptr<PeerMonitor> monitor;
  {
    std::lock_guard<std::mutex> lock(monitor_slot().mu);
    monitor = monitor_slot().current.lock();
  }
  if (monitor) monitor->say_goodbye();
}

}  // namespace

std::shared_ptr<PeerMonitor> acquire_peer_monitor(int rank) {
  if (!env::peer_monitor_enabled()) return nullptr;
  MonitorSlot& slot = monitor_slot();
  std::lock_guard<std::mutex> lock(slot.mu);
  if (auto monitor = slot.current.lock()) return monitor;
  try {
    auto monitor = std::make_shared<PeerMonitor>(rank);
    slot.current = monitor;
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(goodbye_at_exit); });
    return monitor;
  } catch (const Error& e) {
    CHORUS_LOG(WARNING) << "rank " << rank << ": no peer monitor (" << e.what() << "); a dead process is noticed by "
                        << "the collective timeout only";
    return nullptr;
  }
}

}  // namespace chorus::collective::mpi_detail

namespace chorus::collective {

std::shared_ptr<PeerMonitor> process_peer_monitor() {
  auto& slot = mpi_detail::monitor_slot();
  std::lock_guard<std::mutex> lock(slot.mu);
  return slot.current.lock();
}

}  // namespace chorus::collective

namespace chorus::collective::mpi_detail {

// --- a communicator's failure ---

void MpiCommunicator::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (failed_) return;
  failure_ = str_cat("rank ", rank_, " aborted the communicator: ", reason);
  failed_ = true;
  CHORUS_LOG(ERROR) << prefix() << failure_;
  send_notices_locked(kAbortNotice, 0, failure_);
}

// Gives up on `call`: tells the others, listens briefly for who else was waiting, throws.
// `cause` is the notice of the rank that gave up first, if it was not this one.
void MpiCommunicator::time_out(const Call& call, const std::optional<Notice>& cause) {
  const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - call.start).count();
  const std::uint64_t seq = call.fp.sequence;
  std::vector<char> waiting(static_cast<std::size_t>(size_), 0);
  waiting[rank_] = 1;
  if (cause && cause->sequence == seq) waiting[cause->rank] = 1;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (failed_) throw AbortedError(str_cat(prefix(), call.fp.to_string(), " on rank ", rank_, " aborted: ", failure_));
    failed_ = true;
    failure_ = str_cat("rank ", rank_, " timed out after ", waited, " ms in ", call.fp.to_string());
    send_notices_locked(kTimeoutNotice, seq, failure_);
  }
  // Ranks waiting in the same collective give up too when our notice reaches them, and say so.
  const auto grace_end = Clock::now() + std::min(call.timeout, kGrace);
  while (std::count(waiting.begin(), waiting.end(), 1) < size_ && Clock::now() < grace_end) {
    std::optional<Notice> n;
    try {
      n = poll_notice();
    } catch (const Error&) {
      break;
    }
    if (!n)
      std::this_thread::sleep_for(milliseconds(1));
    else if (n->kind == kTimeoutNotice && n->sequence == seq)
      waiting[n->rank] = 1;
  }
  std::string missing, present, missing_hosts;
  for (int r = 0; r < size_; ++r) {
    std::string& list = waiting[r] ? present : missing;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
    // Where the missing ranks run: on several machines the host is what an operator looks at first
    // (a host that lost its network shows up here, as a timeout, not as a death).
    if (!waiting[r]) missing_hosts += str_cat(missing_hosts.empty() ? "" : ", ", "rank ", r, " on ", host_of(r));
  }
  std::string what =
      missing.empty()
          ? str_cat(
                " although every rank was waiting in it (with validate=false the ranks may have called different "
                "collectives; or MPI itself is stuck)")
          : str_cat(" waiting for rank(s) [", missing, "] of ", size_, " (", missing_hosts, "; rank(s) [", present,
                    "] were waiting in it)");
  std::string message = str_cat(call.fp.to_string(), " timed out after ", waited, " ms", what,
                                cause ? str_cat("; first to give up: ", cause->text) : std::string(),
                                ". Last completed collectives on rank ", rank_, ": ", history(),
                                ". A process is stuck, died, or called a different sequence of collectives. This "
                                "communicator is unusable now; a process that cannot continue should exit non-zero "
                                "so that mpirun ends the job.");
  message += flight_record_note(record_flight(call.fp, call.start, "timeout", message));
  CHORUS_LOG(ERROR) << prefix() << message;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    failure_ = message;
  }
  // A rank that never arrived may be on a host cut off the network: MPI_Finalize could wait for it.
  g_collective_timed_out = true;
  throw DeadlineExceededError(prefix() + message);
}

void MpiCommunicator::check_usable(const Fingerprint& fp) {
  std::string note;
  if (!failed_) {
    if (std::optional<Notice> n = poll_notice()) {
      if (n->kind == kLostNotice || n->kind == kLeftNotice) lost_elsewhere(fp, *n);
      fail(n->text);
      // Another rank timed out: this one's history belongs in the post-mortem too.
      if (n->kind == kTimeoutNotice)
        if (const std::string path =
                record_flight(fp, std::nullopt, "timeout", str_cat("told by rank ", n->rank, ": ", n->text));
            !path.empty())
          note = "." + flight_record_note(path);
    }
  }
  // A peer known dead cannot join this call: fail now, and tell the others.
  if (!failed_ && monitor_ && monitor_->any_lost()) lose_peer(fp, std::nullopt);
  if (failed_) {
    const std::string text =
        str_cat(prefix(), fp.to_string(), " on rank ", rank_, " cannot run: the communicator is unusable: ", failure());
    if (lost_) throw UnavailableError(text + note);
    throw AbortedError(text + note);
  }
}

// The host of `rank` as the address exchange told it, for messages.
std::string MpiCommunicator::host_of(int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  if (rank >= 0 && r < peers_.size() && !peers_[r].host.empty()) return peers_[r].host;
  return "unknown";
}

// This rank's peer monitor saw a peer die: fail the communicator, tell every other rank (they may
// not watch that peer themselves), throw UnavailableError naming the lost rank(s) and host(s).
// `waited`: how long the call had been waiting; nullopt when it had not started.
void MpiCommunicator::lose_peer(const Fingerprint& fp, std::optional<Clock::duration> waited) {
  std::string who;
  std::vector<int> dead;  // and those that left failing: nobody listens there any more
  bool died = false;      // some were not goodbyes with an error
  for (PeerLoss loss : monitor_->losses()) {
    if (loss.host.empty()) loss.host = host_of(loss.rank);
    who += (who.empty() ? "" : "; ") + loss.to_string();
    dead.push_back(loss.rank);
    died = died || loss.error.empty();
  }
  const std::string notice = str_cat(who, " (seen by rank ", rank_, " on host ", host_of(rank_), ")");
  const std::string when =
      waited ? str_cat(" after waiting ", std::chrono::duration_cast<milliseconds>(*waited).count(), " ms")
             : std::string(" before it started");
  std::string message =
      str_cat(fp.to_string(), " on rank ", rank_, " cannot complete: a peer process is ",
              died ? "lost: " : "gone (it left with an error and will not join): ", notice, when,
              ". The other ranks are told. This communicator is unusable now; a job that lost a process cannot go on: "
              "exit non-zero and restart it (from the last checkpoint).");
  message += flight_record_note(record_flight(
      fp, waited ? std::optional<Clock::time_point>(Clock::now() - *waited) : std::nullopt, "peer lost", message));
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (!failed_) {
      failed_ = true;
      lost_ = true;
      failure_ = message;
      send_notices_locked(died ? kLostNotice : kLeftNotice, fp.sequence, notice, dead);
    }
  }
  (died ? g_peer_lost : g_peer_left_failing) = true;
  CHORUS_LOG(ERROR) << prefix() << message;
  throw UnavailableError(prefix() + message);
}

// Another rank told us that it saw a peer die.
void MpiCommunicator::lost_elsewhere(const Fingerprint& fp, const Notice& n) {
  const bool died = n.kind == kLostNotice;
  std::string message = str_cat(
      fp.to_string(), " on rank ", rank_, " cannot complete: a peer process is ",
      died ? "lost: " : "gone (it left with an error and will not join): ", n.text,
      ". This communicator is unusable now; a job that lost a process cannot go on: exit non-zero and restart it "
      "(from the last checkpoint).");
  message += flight_record_note(record_flight(fp, std::nullopt, "peer lost", message));
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (!failed_) {
      failed_ = true;
      lost_ = true;
      failure_ = message;
    }
  }
  (died ? g_peer_lost : g_peer_left_failing) = true;
  CHORUS_LOG(ERROR) << prefix() << message;
  throw UnavailableError(prefix() + message);
}

// --- the notice channel ---

void MpiCommunicator::post_notice_receive() {
  CHORUS_MPI_CHECK(MPI_Irecv(&ch_->incoming, sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE, kNoticeTag, ch_->comm,
                             &ch_->incoming_request));
}

// A notice from another rank of this communicator, if one arrived.
std::optional<Notice> MpiCommunicator::poll_notice() {
  int got = 0;
  CHORUS_MPI_CHECK(MPI_Test(&ch_->incoming_request, &got, MPI_STATUS_IGNORE));
  if (!got) return std::nullopt;
  Notice n = ch_->incoming;
  post_notice_receive();
  if (n.comm_id != id_ || n.rank < 0 || n.rank >= size_ || n.rank == rank_) {
    CHORUS_LOG(WARNING) << prefix() << "ignoring a notice meant for communicator " << n.comm_id << " from rank "
                        << n.rank;
    return std::nullopt;
  }
  n.text[sizeof(n.text) - 1] = '\0';
  return n;
}

// One small Isend to every other rank; never waited for (the Channel keeps buffer and request).
// `skip`: ranks known to be dead (nothing to tell them, and MPI may not like sending to them).
void MpiCommunicator::send_notices_locked(std::int32_t kind, std::uint64_t sequence, const std::string& text,
                                          const std::vector<int>& skip) {
  int finalized = 1;
  MPI_Finalized(&finalized);
  for (int r = 0; r < size_ && !finalized; ++r) {
    if (r == rank_ || std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
    Notice& n = ch_->outgoing.emplace_back();
    n.comm_id = id_;
    n.sequence = sequence;
    n.kind = kind;
    n.rank = rank_;
    std::memcpy(n.text, text.data(), std::min(text.size(), sizeof(n.text) - 1));
    MPI_Request req = MPI_REQUEST_NULL;
    try {
      CHORUS_MPI_CHECK(MPI_Isend(&n, sizeof(Notice), MPI_BYTE, r, kNoticeTag, ch_->comm, &req));
    } catch (const Error& e) {
      CHORUS_LOG(WARNING) << prefix() << "could not tell rank " << r << ": " << e.what();
    }
    ch_->outgoing_requests.push_back(req);
  }
}

void MpiCommunicator::fail(const std::string& failure) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (failed_) return;
  failure_ = failure;
  failed_ = true;
}

std::string MpiCommunicator::failure() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return failure_;
}

std::string MpiCommunicator::history() const {
  std::string s;
  const std::uint64_t shown = std::min<std::uint64_t>(completed_, 3);
  for (std::uint64_t i = completed_ - shown; i < completed_; ++i)
    s += (s.empty() ? "" : ", ") + history_[i % kFlightHistory].fp.to_string();
  return s.empty() ? "none" : s;
}

namespace {
std::int64_t monotonic_us(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}
}  // namespace

std::string MpiCommunicator::record_flight(const Fingerprint& fp, std::optional<Clock::time_point> start,
                                           const char* trigger, const std::string& message) const noexcept {
  try {
    if (env::flight_record_dir().empty()) return "";
    FlightRecord r;
    r.rank = rank_;
    r.size = size_;
    r.communicator = str_cat("mpi#", id_);
    r.backend = "mpi";
    r.trigger = trigger;
    r.error = message;
    r.failing_call = {fp.to_string(), fp.sequence, start ? monotonic_us(*start) : 0, 0};
    const std::uint64_t kept = std::min<std::uint64_t>(completed_, kFlightHistory);
    for (std::uint64_t i = completed_ - kept; i < completed_; ++i) {
      const Completed& c = history_[i % kFlightHistory];
      r.completed.push_back({c.fp.to_string(), c.fp.sequence, monotonic_us(c.start), monotonic_us(c.end)});
    }
    return write_flight_record(r);
  } catch (const std::exception& e) {  // out of memory: the collective's own error goes on
    CHORUS_LOG(WARNING) << prefix() << "no flight record: " << e.what();
    return "";
  }
}

}  // namespace chorus::collective::mpi_detail
