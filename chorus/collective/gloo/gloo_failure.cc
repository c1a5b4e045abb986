// How a Gloo communicator fails (gloo.h, "Failure"): its own timeout (naming the ranks whose
// fingerprints did not come), an abort, a lost peer process — and how the ranks agree on the cause:
// the rank that sees a failure first writes it to the store and closes its connections; a rank whose
// connection closes reads the first record and raises what it says. Internal (gloo_internal.h).
#include <sys/socket.h>

#include <gloo/common/error.h>

#include <algorithm>
#include <thread>

#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::collective::gloo_detail {

using internal::str_cat;

namespace {

// Gloo messages start with "[/path/file.cc:123] ": drop that.
std::string without_location(std::string s) {
  if (!s.empty() && s[0] == '[')
    if (const auto end = s.find("] "); end != std::string::npos) s.erase(0, end + 2);
  return s;
}

std::int64_t monotonic_us(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

void GlooCommunicator::close_connections() noexcept {
  for (const Connection& c : connections_) c.shut_down();
}

std::vector<int> GlooCommunicator::broken_peers() const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && connections_[static_cast<std::size_t>(r)].peer_closed()) out.push_back(r);
  return out;
}

std::string GlooCommunicator::peer_name(int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  return r < peers_.size() ? peers_[r].to_string(rank) : str_cat("rank ", rank);
}

void GlooCommunicator::abort(const std::string& reason) {
  const std::string text = str_cat("rank ", rank_, " aborted the communicator: ", reason);
  if (!fail(text, FailureKind::kAbort)) return;
  CHORUS_LOG(ERROR) << prefix() << text;
  record_failure({FailureKind::kAbort, 0, rank_, {}, text});
  close_connections();  // wakes this rank's waiter and tells the peers
}

void GlooCommunicator::check_usable(const Fingerprint& fp) {
  if (!failed_) return;
  std::lock_guard<std::mutex> lock(state_mu_);
  const std::string text =
      str_cat(prefix(), fp.to_string(), " on rank ", rank_, " cannot run: the communicator is unusable: ", failure_);
  if (failure_kind_ == FailureKind::kLost) throw UnavailableError(text);
  throw AbortedError(text);
}

void GlooCommunicator::fail_call(const Call& call, const std::string& what, const std::vector<int>& missing,
                                 const std::vector<int>& broken) {
  if (failed_) {  // abort() from another thread woke us, or an earlier failure
    close_connections();
    check_usable(call.fp);
  }
  // Gloo's own timeout ("Timed out waiting <n>ms for recv operation to complete") ends at the
  // call's deadline (Call::left rounds up); the clock decides, the text covers a coarse clock.
  if (Clock::now() >= call.deadline || what.find("Timed out waiting") != std::string::npos) time_out(call, missing);
  if (std::optional<FailureRecord> r = first_failure(kRecordGrace)) raise_recorded(call, *r);
  lose_peers(call, what, broken);
}

std::vector<int> GlooCommunicator::silent_in_data_phase(const Call& call, std::string* store_error) noexcept {
  const std::string key = str_cat(prefix_, "/stalled/", call.fp.sequence);
  std::vector<int> silent;
  try {
    store_.set(str_cat(key, "/", rank_), "");
    const auto until = Clock::now() + kRecordGrace;
    for (std::int64_t stalled = store_.add(key, 1); stalled < size_ && Clock::now() < until;
         stalled = store_.add(key, 0))
      std::this_thread::sleep_for(milliseconds(20));
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !store_.check({str_cat(key, "/", r)})) silent.push_back(r);
  } catch (const DeadlineExceededError& e) {
    *store_error = str_cat("; the store (", store_.describe(), ") does not answer either (", e.message(),
                           "): this rank's host is probably the one cut off");
    return {};
  } catch (const std::exception& e) {
    *store_error = str_cat("; the ranks stuck with it could not be asked: ", e.what());
    return {};
  }
  return silent;
}

void GlooCommunicator::time_out(const Call& call, std::vector<int> missing) {
  std::string what;
  if (missing.empty() && size_ > 1) {
    std::string store_error;
    missing = silent_in_data_phase(call, &store_error);
    what = str_cat(" in its data phase, after every rank had arrived", store_error);
    if (missing.empty() && store_error.empty())
      what += ", and every rank timed out in it (with validate=false the ranks may have called different collectives)";
  }
  std::string who, ranks;
  for (int r : missing) {
    ranks += str_cat(ranks.empty() ? "" : ", ", r);
    who += str_cat(who.empty() ? "" : "; ", peer_name(r));
  }
  if (!missing.empty())
    what += what.empty() ? str_cat(" waiting for rank(s) [", ranks, "] of ", size_, " (", who, ")")
                         : str_cat(": rank(s) [", ranks, "] of ", size_, " (", who, ") did not report the timeout ",
                                   "through the store within ", kRecordGrace.count(),
                                   " ms (cut off from the network, or stuck outside the collective)");
  const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - call.start).count();
  std::string message =
      str_cat(call.fp.to_string(), " on rank ", rank_, " timed out after ", waited, " ms", what,
              ". Last completed collectives on rank ", rank_, ": ", history(),
              ". A process is stuck, died, or called a different sequence of collectives. This communicator is "
              "unusable now.");
  message += flight_record_note(record_flight(call.fp, call.start, "timeout", message));
  if (!fail(message, FailureKind::kTimeout)) check_usable(call.fp);
  CHORUS_LOG(ERROR) << prefix() << message;
  record_failure({FailureKind::kTimeout, call.fp.sequence, rank_, missing, message});
  close_connections();
  throw DeadlineExceededError(prefix() + message);
}

void GlooCommunicator::raise_recorded(const Call& call, const FailureRecord& r) {
  // Ranks waiting in the same call time out with the one that gave up; a rank it waited for comes
  // too late: for it the communicator is unusable (AbortedError).
  const bool late = std::find(r.missing.begin(), r.missing.end(), rank_) != r.missing.end();
  const bool same_timeout = r.kind == FailureKind::kTimeout && r.sequence == call.fp.sequence && !late;
  std::string message = str_cat(call.fp.to_string(), " on rank ", rank_,
                                same_timeout ? " timed out with rank "
                                : late       ? " came too late: the communicator is unusable: told by rank "
                                             : " cannot complete: told by rank ",
                                r.rank, ": ", r.text);
  const FailureKind kind = r.kind == FailureKind::kLost ? FailureKind::kLost : r.kind;
  if (r.kind != FailureKind::kAbort)
    message += flight_record_note(
        record_flight(call.fp, call.start, r.kind == FailureKind::kLost ? "peer lost" : "timeout", message));
  if (!fail(message, kind)) check_usable(call.fp);
  CHORUS_LOG(ERROR) << prefix() << message;
  close_connections();
  if (same_timeout) throw DeadlineExceededError(prefix() + message);
  if (r.kind == FailureKind::kLost) throw UnavailableError(prefix() + message);
  throw AbortedError(prefix() + message);
}

void GlooCommunicator::lose_peers(const Call& call, const std::string& what, std::vector<int> broken) {
  // Gloo's message names the connection it failed on by the peer's address ("Connection closed by
  // peer [10.0.0.2]:40123"): that rank is lost even if Gloo had not yet closed its socket when the
  // snapshot was taken.
  for (int r = 0; r < size_; ++r) {
    const std::string& address = peers_[static_cast<std::size_t>(r)].address;
    if (r != rank_ && !address.empty() && what.find(address) != std::string::npos &&
        std::find(broken.begin(), broken.end(), r) == broken.end())
      broken.push_back(r);
  }
  std::sort(broken.begin(), broken.end());
  std::string who;
  for (int r : broken) who += str_cat(who.empty() ? "" : "; ", peer_name(r));
  who = who.empty() ? str_cat("a connection failed: ", without_location(what))
                    : str_cat(who, ": its connection closed (", without_location(what), ")");
  const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - call.start).count();
  std::string message =
      str_cat(call.fp.to_string(), " on rank ", rank_, " cannot complete: a peer process is lost: ", who,
              " (seen by rank ", rank_, " after waiting ", waited,
              " ms). This communicator is unusable now; a job that lost a process cannot go on: exit non-zero and "
              "restart it (from the last checkpoint).");
  message += flight_record_note(record_flight(call.fp, call.start, "peer lost", message));
  if (!fail(message, FailureKind::kLost)) check_usable(call.fp);
  CHORUS_LOG(ERROR) << prefix() << message;
  record_failure({FailureKind::kLost, call.fp.sequence, rank_, {}, message});
  close_connections();
  throw UnavailableError(prefix() + message);
}

void GlooCommunicator::record_failure(const FailureRecord& r) noexcept {
  try {
    const std::int64_t n = store_.add(prefix_ + "/failures", 1);
    store_.set(str_cat(prefix_, "/failure/", n), encode_failure(r));
  } catch (const std::exception& e) {
    CHORUS_LOG(WARNING) << prefix() << "could not write the failure to " << store_.describe() << ": " << e.what();
  }
}

std::optional<FailureRecord> GlooCommunicator::first_failure(milliseconds within) noexcept {
  try {
    return decode_failure(store_.get(prefix_ + "/failure/1", within));
  } catch (const std::exception&) {  // none came in time, or the store is gone too
    return std::nullopt;
  }
}

bool GlooCommunicator::fail(const std::string& failure, FailureKind kind) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (failed_) return false;
  failure_ = failure;
  failure_kind_ = kind;
  failed_ = true;
  return true;
}

std::string GlooCommunicator::failure() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return failure_;
}

std::string GlooCommunicator::history() const {
  std::string s;
  const std::uint64_t shown = std::min<std::uint64_t>(completed_, 3);
  for (std::uint64_t i = completed_ - shown; i < completed_; ++i)
    s += (s.empty() ? "" : ", ") + history_[i % kFlightHistory].fp.to_string();
  return s.empty() ? "none" : s;
}

std::string GlooCommunicator::record_flight(const Fingerprint& fp, std::optional<Clock::time_point> start,
                                            const char* trigger, const std::string& message) const noexcept {
  try {
    if (env::flight_record_dir().empty()) return "";
    FlightRecord r;
    r.rank = rank_;
    r.size = size_;
    r.communicator = str_cat("gloo[", prefix_, "]");
    r.backend = "gloo";
    r.trigger = trigger;
    r.error = message;
    r.failing_call = {fp.to_string(), fp.sequence, start ? monotonic_us(*start) : 0, 0};
    const std::uint64_t kept = std::min<std::uint64_t>(completed_, kFlightHistory);
    for (std::uint64_t i = completed_ - kept; i < completed_; ++i) {
      const Completed& c = history_[i % kFlightHistory];
      r.completed.push_back({c.fp.to_string(), c.fp.sequence, monotonic_us(c.start), monotonic_us(c.end)});
    }
    return write_flight_record(r);
  } catch (const std::exception& e) {
    CHORUS_LOG(WARNING) << prefix() << "no flight record: " << e.what();
    return "";
  }
}

}  // namespace chorus::collective::gloo_detail
