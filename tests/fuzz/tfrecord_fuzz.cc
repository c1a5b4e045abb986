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
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/tfrecord.h"
#include "summary/record.h"
#include "tests/fuzz/fuzz_util.h"

using chorus::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in = chorus::fuzz::as_view(data, size);
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
      chorus::fuzz::expect_error<chorus::DataLossError>(e);
      fail_at = reader.offset();
      // The position stays at the bad record: reading again fails again.
      bool failed_again = false;
      try {
        reader.read();
      } catch (const chorus::DataLossError&) {
        failed_again = true;
      }
      check(failed_again && reader.offset() == fail_at, "a failed read leaves the reader at the bad record");
    }
    if (!offsets.empty()) {
      // Resuming at a boundary (what the dataset's iterator state does) reads the same record.
      const std::size_t k = records.size() / 2;
      reader.seek(offsets[k]);
      const std::optional<std::string> again = reader.read();
      check(again && *again == records[k], "seek + read returns the same record");
    }
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
