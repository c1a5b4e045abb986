#include <chorus/summary/xplane.h>

#include <algorithm>
#include <map>

#include <chorus/core/proto_wire.h>

namespace chorus::summary {

namespace {

using wire::ProtoWriter;

// Field numbers (xplane.proto).
namespace xspace {
inline constexpr int kPlanes = 1, kHostnames = 4;
}
namespace xplane {
inline constexpr int kId = 1, kName = 2, kLines = 3, kEventMetadata = 4, kStatMetadata = 5;
}
namespace xline {
inline constexpr int kId = 1, kName = 2, kTimestampNs = 3, kEvents = 4, kDurationPs = 9, kDisplayId = 10;
}
namespace xevent {
inline constexpr int kMetadataId = 1, kOffsetPs = 2, kDurationPs = 3, kStats = 4;
}
namespace xstat {
inline constexpr int kMetadataId = 1, kStrValue = 5;
}
inline constexpr std::int64_t kCategoryStat = 1, kArgsStat = 2;

// A map<int64, M> entry: {key = 1, value = 2}.
void add_map_entry(ProtoWriter& w, int field, std::int64_t key, const ProtoWriter& value) {
  ProtoWriter entry;
  entry.add_int64(1, key);
  entry.add_message(2, value);
  w.add_message(field, entry);
}

ProtoWriter metadata(std::int64_t id, std::string_view name) {  // XEventMetadata / XStatMetadata: id 1, name 2
  ProtoWriter m;
  m.add_int64(1, id);
  m.add_bytes(2, name);
  return m;
}

ProtoWriter str_stat(std::int64_t id, std::string_view value) {
  ProtoWriter s;
  s.add_int64(xstat::kMetadataId, id);
  s.add_bytes(xstat::kStrValue, value);
  return s;
}

}  // namespace

std::string encode_xspace(const timeline::Capture& capture, std::string_view hostname) {
  std::map<std::string, std::int64_t> name_ids;  // event name → metadata id
  std::map<int, std::vector<const timeline::CapturedEvent*>> by_line;
  for (const auto& e : capture.events) {
    name_ids.try_emplace(e.name, static_cast<std::int64_t>(name_ids.size()) + 1);
    by_line[e.tid].push_back(&e);
  }
  ProtoWriter plane;
  plane.add_bytes(xplane::kName, "/host:CPU");
  for (const auto& [tid, events] : by_line) {
    std::int64_t first_us = events.front()->start_us, last_us = events.front()->end_us;
    for (const auto* e : events) {
      first_us = std::min(first_us, e->start_us);
      last_us = std::max(last_us, e->end_us);
    }
    ProtoWriter line;
    line.add_int64(xline::kId, tid);
    const auto name = capture.threads.find(tid);
    line.add_bytes(xline::kName, name != capture.threads.end() ? name->second : "thread " + std::to_string(tid));
    line.add_int64(xline::kTimestampNs, first_us * 1000);
    for (const auto* e : events) {
      ProtoWriter ev;
      ev.add_int64(xevent::kMetadataId, name_ids.at(e->name));
      ev.add_int64(xevent::kOffsetPs, (e->start_us - first_us) * 1000000);
      ev.add_int64(xevent::kDurationPs, std::max<std::int64_t>(0, e->end_us - e->start_us) * 1000000);
      ev.add_message(xevent::kStats, str_stat(kCategoryStat, e->category));
      if (!e->args_json.empty()) ev.add_message(xevent::kStats, str_stat(kArgsStat, e->args_json));
      line.add_message(xline::kEvents, ev);
    }
    line.add_int64(xline::kDurationPs, (last_us - first_us) * 1000000);
    line.add_int64(xline::kDisplayId, tid);
    plane.add_message(xplane::kLines, line);
  }
  for (const auto& [name, id] : name_ids) add_map_entry(plane, xplane::kEventMetadata, id, metadata(id, name));
  add_map_entry(plane, xplane::kStatMetadata, kCategoryStat, metadata(kCategoryStat, "category"));
  add_map_entry(plane, xplane::kStatMetadata, kArgsStat, metadata(kArgsStat, "args"));
  ProtoWriter space;
  space.add_message(xspace::kPlanes, plane);
  space.add_bytes(xspace::kHostnames, hostname);
  return space.release();
}

}  // namespace chorus::summary
