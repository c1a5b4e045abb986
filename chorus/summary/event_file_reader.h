// Reading TensorBoard event files: for tests, tools and users who want their scalars back
// (TF's tf.compat.v1.train.summary_iterator; tensorboard's EventFileLoader).
//
//   for (const auto& file : chorus::summary::list_event_files("./logs"))
//     for (const chorus::summary::Event& e : chorus::summary::read_events(file))
//       if (e.summary) for (const auto& v : e.summary->value) std::cout << v.tag << " " << e.step << "\n";
//
// Every record's two CRCs are checked (summary/record.h) and every Event is parsed with
// summary/event.h. Errors: a missing or unreadable file → NotFoundError / PermissionDeniedError
// naming it; a CRC mismatch, a truncated record, or bytes that are not an Event → DataLossError
// naming the file and the record's byte offset. Thread-safety: one reader per thread; the free
// functions are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/summary/event.h>
#include <chorus/summary/record.h>

namespace chorus::summary {

class EventFileReader {
 public:
  explicit EventFileReader(const std::string& path) : records_(path) {}

  // The next Event, or nullopt at the end of the file.
  std::optional<Event> next();
  // Byte offset of the next record (see RecordReader::offset).
  std::uint64_t offset() const { return records_.offset(); }

 private:
  RecordReader records_;
  std::string record_;
};

// Every Event of `path`, in file order.
std::vector<Event> read_events(const std::string& path);

// True when TensorBoard treats `path` as an event file: its base name contains "tfevents" and it
// does not end in ".profile-empty" (docs/formats.md A1).
bool is_event_file(const std::string& path);

// The event files directly inside `dir`, sorted by name — the order TensorBoard reads them in,
// which is their creation order thanks to the zero-padded timestamp. NotFoundError when `dir`
// does not exist.
std::vector<std::string> list_event_files(const std::string& dir);

}  // namespace chorus::summary
