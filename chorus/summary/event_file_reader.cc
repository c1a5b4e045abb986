#include <chorus/summary/event_file_reader.h>

#include <algorithm>
#include <filesystem>

#include <chorus/core/error.h>
#include <chorus/core/file_io.h>

namespace chorus::summary {

namespace fs = std::filesystem;

std::optional<Event> EventFileReader::next() {
  const std::uint64_t at = records_.offset();
  if (!records_.read(record_)) return std::nullopt;
  try {
    return decode_event(record_);
  } catch (const DataLossError& e) {
    throw DataLossError(chorus::internal::str_cat("'", records_.path(), "': record at byte offset ", at,
                                                  " is not an Event: ", e.message()));
  }
}

std::vector<Event> read_events(const std::string& path) {
  EventFileReader reader(path);
  std::vector<Event> events;
  while (auto e = reader.next()) events.push_back(std::move(*e));
  return events;
}

bool is_event_file(const std::string& path) {
  const std::string base = fs::path(path).filename().string();
  constexpr std::string_view kExcluded = ".profile-empty";
  const bool excluded =
      base.size() >= kExcluded.size() && base.compare(base.size() - kExcluded.size(), kExcluded.size(), kExcluded) == 0;
  return base.find("tfevents") != std::string::npos && !excluded;
}

std::vector<std::string> list_event_files(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) io::throw_errno(ec.value(), "cannot list event files in", dir);
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : it) {
    if (entry.is_regular_file(ec) && is_event_file(entry.path().string())) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace chorus::summary
