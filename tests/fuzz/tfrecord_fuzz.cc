// libFuzzer target: TFRecord framing as data/tfrecord.h's TFRecordReader reads it (the
// tf.data.TFRecordDataset path; chorus-train --tfrecord). The reader takes a path, so the input
// bytes are written to a scratch file (tests/fuzz/fuzz_util.h) and read record by record.
//
// Contract: DataLossError at the first bad record (CRC mismatch, truncation), with the reader still
// at that record; NotFoundError etc. cannot happen for the scratch file. Oracles on top:
//   - each record read re-frames (summary::frame_record, the same framing) to exactly the input
//     bytes it was read from, and the offsets advance by 16 + length;
//   - seek() back to a record boundary reads the same record again;
//   - differential: summary/record.h's RecordReader, an independent reader of the same framing
//     (for event files), returns the same records and fails at the same offset.
// Compressed mode: an input starting "ZLIB" or "GZIP" is the rest of the bytes as a file of that
// compression_type (data/zlib_stream.h), read with max_record_bytes = 16 MiB. Contract and
// oracles: DataLossError, or ResourceExhaustedError for a record over the ceiling; a failed read
// fails again at the same offset; seek + read returns the same record; and the records read,
// framed again, are a prefix of what zlib's own inflate (an independent decoder, capped at 64 MiB)
// makes of the file — all of it when the read ended cleanly.
#include <zlib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/zlib_oracle.h"
#include <chorus/data/tfrecord.h>
#include <chorus/summary/record.h>

using chorus::fuzz::check;

namespace {

// After a DataLossError (or a ResourceExhaustedError: a record over max_record_bytes): the
// position stays at the bad record, and reading again fails again, with the same class.
std::uint64_t check_fails_again(chorus::data::TFRecordReader& reader, const chorus::Error& first) {
  const std::uint64_t fail_at = reader.offset();
  bool failed_again = false;
  try {
    reader.read();
  } catch (const chorus::Error& e) {
    failed_again = e.code() == first.code();
  }
  check(failed_again && reader.offset() == fail_at, "a failed read leaves the reader at the bad record");
  return fail_at;
}

// Resuming at a boundary (what the dataset's iterator state does) reads the same record.
void check_seek_rereads(chorus::data::TFRecordReader& reader, const std::vector<std::uint64_t>& offsets,
                        const std::vector<std::string>& records) {
  if (offsets.empty()) return;
  const std::size_t k = records.size() / 2;
  reader.seek(offsets[k]);
  const std::optional<std::string> again = reader.read();
  check(again && *again == records[k], "seek + read returns the same record");
}

int fuzz_compressed(std::string_view in, bool gzip) {
  using chorus::data::TFRecordCompression;
  // A ceiling below the oracle's 64 MiB cap, so that records over it are exercised too.
  const chorus::data::TFRecordOptions options{
      .compression = gzip ? TFRecordCompression::kGzip : TFRecordCompression::kZlib,
      .max_record_bytes = std::uint64_t{16} << 20};
  const std::string& path = chorus::fuzz::scratch_file().hold(in);
  std::string framed;  // the records read, framed again
  std::vector<std::uint64_t> offsets;
  std::vector<std::string> records;
  bool clean = false;
  chorus::data::TFRecordReader reader(path, options);
  try {
    for (;;) {
      const std::uint64_t at = reader.offset();
      std::optional<std::string> r = reader.read();
      if (!r) {
        clean = true;
        break;
      }
      check(reader.offset() == at + 16 + r->size(), "offset advances by one framed record");
      framed += chorus::summary::frame_record(*r);
      offsets.push_back(at);
      records.push_back(std::move(*r));
    }
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError, chorus::ResourceExhaustedError>(e);
    check_fails_again(reader, e);
  }
  check_seek_rereads(reader, offsets, records);
  bool complete = false;
  const std::string inflated = chorus::fuzz::inflate_independently(in, gzip, std::size_t{64} << 20, &complete);
  if (inflated.size() <= (std::size_t{64} << 20)) {
    check(inflated.compare(0, framed.size(), framed) == 0, "the records are a prefix of zlib's inflate");
    if (clean) check(complete && inflated == framed, "a clean end is the whole stream");
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in = chorus::fuzz::as_view(data, size);
  if (in.substr(0, 4) == "ZLIB" || in.substr(0, 4) == "GZIP") return fuzz_compressed(in.substr(4), in[0] == 'G');
  const std::string& path = chorus::fuzz::scratch_file().hold(in);

  std::vector<std::string> records;
  std::vector<std::uint64_t> offsets;  // start of each record
  std::uint64_t fail_at = UINT64_MAX;  // offset of the record that failed, if one did
  {
    chorus::data::TFRecordReader reader(path);
    check(reader.file_size() == size, "file_size");
    try {
      for (;;) {
        const std::uint64_t at = reader.offset();
        std::optional<std::string> r = reader.read();
        if (!r) {
          check(at == size, "a clean end is at the end of the file");
          break;
        }
        check(
            reader.offset() == at + chorus::data::kTFRecordHeaderBytes + r->size() + chorus::data::kTFRecordFooterBytes,
            "offset advances by one framed record");
        check(chorus::summary::frame_record(*r) == in.substr(at, reader.offset() - at),
              "record re-frames to its bytes");
        offsets.push_back(at);
        records.push_back(std::move(*r));
      }
    } catch (const chorus::Error& e) {
      // The default ceiling (256 MiB) is beyond any file the fuzzer makes: DataLossError only.
      chorus::fuzz::expect_error<chorus::DataLossError>(e);
      fail_at = check_fails_again(reader, e);
    }
    check_seek_rereads(reader, offsets, records);
  }

  // The event-file reader of the same framing must agree.
  chorus::summary::RecordReader other(path);
  std::string record;
  std::size_t i = 0;
  try {
    while (other.read(record)) {
      check(i < records.size() && record == records[i], "RecordReader returns the same records");
      ++i;
    }
    check(fail_at == UINT64_MAX && i == records.size(), "both readers reach a clean end");
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    check(fail_at == other.offset() && i == records.size(), "both readers fail at the same record");
  }
  return 0;
}
