// The flight record's file (flight_record.h): one JSON document per failing rank, Chrome trace
// events for a viewer plus the record itself, written through core/file_io.h.
#include <chorus/collective/flight_record.h>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <exception>

#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/host.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/logging.h>
#include <chorus/core/timeline.h>

namespace chorus::collective {

using internal::Json;
using internal::str_cat;

namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json entry_json(const FlightEntry& e, bool with_end) {
  Json j = Json::object();
  j["call"] = e.call;
  j["sequence"] = e.sequence;
  j["start_us"] = e.start_us;
  if (with_end) j["end_us"] = e.end_us;
  return j;
}

}  // namespace

std::string flight_record_json(const FlightRecord& r) {
  Json events = Json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", r.rank},
                    {"args", {{"name", str_cat("rank ", r.rank, " (", host_name_or("unknown-host"), ")")}}}});
  for (const FlightEntry& e : r.completed) {
    if (e.start_us == 0) continue;  // untimed (in-process backends): listed in the record only
    events.push_back({{"ph", "X"},
                      {"cat", "collective"},
                      {"name", e.call},
                      {"ts", e.start_us},
                      {"dur", std::max<std::int64_t>(0, e.end_us - e.start_us)},
                      {"pid", r.rank},
                      {"tid", 1},
                      {"args", {{"state", "completed"}, {"communicator", r.communicator}}}});
  }
  const std::int64_t now = timeline::now_us();
  if (r.failing_call.start_us != 0)
    events.push_back({{"ph", "X"},
                      {"cat", "collective"},
                      {"name", r.failing_call.call},
                      {"ts", r.failing_call.start_us},
                      {"dur", std::max<std::int64_t>(0, now - r.failing_call.start_us)},
                      {"pid", r.rank},
                      {"tid", 1},
                      {"args", {{"state", r.trigger}, {"communicator", r.communicator}}}});
  events.push_back({{"ph", "i"},
                    {"s", "p"},
                    {"cat", "collective"},
                    {"name", str_cat("failed: ", r.trigger)},
                    {"ts", now},
                    {"pid", r.rank},
                    {"tid", 1},
                    {"args", {{"error", r.error}}}});

  Json rec = Json::object();
  rec["version"] = 1;
  rec["rank"] = r.rank;
  rec["size"] = r.size;
  rec["host"] = host_name_or("unknown-host");
  rec["pid"] = static_cast<std::int64_t>(::getpid());
  rec["time"] = utc_now();
  rec["now_us"] = now;
  rec["communicator"] = r.communicator;
  rec["backend"] = r.backend;
  rec["trigger"] = r.trigger;
  rec["error"] = r.error;
  rec["failing_call"] = entry_json(r.failing_call, false);
  Json completed = Json::array();
  for (const FlightEntry& e : r.completed) completed.push_back(entry_json(e, true));
  rec["completed"] = std::move(completed);
  Json peers = Json::object();
  for (const auto& [rank, calls] : r.peers) peers[std::to_string(rank)] = calls;
  rec["peers"] = std::move(peers);

  Json doc = Json::object();
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  doc["chorus_flight_record"] = std::move(rec);
  // Peers' messages may hold any bytes: never let invalid UTF-8 make dump() throw.
  return doc.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string write_flight_record(const FlightRecord& record) noexcept {
  std::string path;
  try {
    const std::string dir = env::flight_record_dir();
    if (dir.empty()) return "";
    path = str_cat(dir, "/flight-", record.rank, ".json");
    io::create_directories(dir);
    io::replace_file(path, flight_record_json(record));
    CHORUS_LOG(ERROR) << "rank " << record.rank << ": flight record of " << record.communicator << " written to "
                      << path;
    return path;
  } catch (const std::exception& e) {
    try {
      CHORUS_LOG(WARNING) << "rank " << record.rank << ": could not write the flight record"
                          << (path.empty() ? std::string() : " " + path) << ": " << e.what();
    } catch (...) {
    }
  } catch (...) {
  }
  return "";
}

std::string flight_record_note(const std::string& path) {
  return path.empty() ? std::string() : str_cat(" Flight record: ", path);
}

}  // namespace chorus::collective
