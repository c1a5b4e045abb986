// RAII for a C stdio stream (std::FILE*), the handle the data readers and writers hold (TFRecord,
// IDX): buffered reads and writes of small records. Closing through the destructor cannot report
// an error; writers that must know call fclose themselves (TFRecordWriter::close).
#pragma once

#include <cstdio>
#include <memory>

namespace chorus::data {

struct StdioFileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using StdioFile = std::unique_ptr<std::FILE, StdioFileCloser>;

}  // namespace chorus::data
