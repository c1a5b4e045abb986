#include <chorus/summary/record.h>

#include <cstring>

#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::summary {

void append_record(std::string& out, std::string_view data) {
  std::string header;
  wire::append_fixed64(header, data.size());
  wire::append_fixed32(header, masked_crc32c(header.data(), 8));
  out.append(header);
  out.append(data);
  wire::append_fixed32(out, masked_crc32c(data.data(), data.size()));
}

RecordReader::RecordReader(const std::string& path, std::uint64_t offset)
    : file_(io::File::open_for_read(path)), offset_(offset) {
  if (offset != 0) file_.seek(offset);
}

namespace {

std::uint32_t load32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

bool RecordReader::read(std::string& record) {
  if (failed_) throw DataLossError(failure_);
  auto fail = [&](const std::string& why) {
    failed_ = true;
    failure_ = chorus::internal::str_cat("'", file_.path(), "': record at byte offset ", offset_, ": ", why);
    file_.seek(offset_);
    throw DataLossError(failure_);
  };
  char header[kRecordHeaderSize];
  const std::size_t got = file_.read(header, sizeof header);
  if (got == 0) return false;
  if (got < 8) fail("truncated record in header (" + std::to_string(got) + " of 8 length bytes)");
  if (got < kRecordHeaderSize) fail("truncated record in header crc");
  std::uint64_t length;
  std::memcpy(&length, header, 8);
  const std::uint32_t stored = load32(header + 8);
  const std::uint32_t computed = masked_crc32c(header, 8);
  if (stored != computed)
    fail(chorus::internal::str_cat("failed header crc32 check (stored masked CRC32C 0x", std::hex, stored,
                                   ", computed 0x", computed, std::dec, " over length ", length, ")"));
  // The length's CRC passed, but do not trust it with an allocation larger than the file.
  const std::uint64_t left = file_.size() - std::min<std::uint64_t>(file_.size(), offset_ + kRecordHeaderSize);
  if (length > left)
    fail(
        chorus::internal::str_cat("truncated record in data (length ", length, ", ", left, " bytes left in the file)"));
  record.resize(static_cast<std::size_t>(length));
  if (file_.read(record.data(), record.size()) != record.size()) fail("truncated record in data");
  char crc[4];
  if (file_.read(crc, 4) != 4) fail("truncated record in data crc");
  const std::uint32_t stored_data = load32(crc);
  const std::uint32_t computed_data = masked_crc32c(record.data(), record.size());
  if (stored_data != computed_data)
    fail(chorus::internal::str_cat("failed event crc32 check (stored masked CRC32C 0x", std::hex, stored_data,
                                   ", computed 0x", computed_data, std::dec, " over ", length, " data bytes)"));
  offset_ += kRecordOverhead + length;
  return true;
}

}  // namespace chorus::summary
