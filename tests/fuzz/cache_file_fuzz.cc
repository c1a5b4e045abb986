// libFuzzer target: the cache(filename) file reader, data/cache_file_internal.h's CacheFileReader
// (what Dataset::cache(filename) reads on every pass after the first). It takes a path, so the
// input is written to a scratch file (tests/fuzz/fuzz_util.h). Elements are Tensors, so this target
// links all of core/ (the CPU runtime behind Tensor::from_host; no CUDA).
//
// Contract (cache_file_internal.h): DataLossError for anything that is not a cache file, checked
// before a damaged file yields (header, footer), or at the record that is bad. On an accepted file:
// the elements are as many as the footer says, and each re-encodes (encode_cache_element) to
// exactly its record's bytes (the encoding is canonical), which TFRecordReader reads independently.
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/data/cache_file_internal.h>
#include <chorus/data/tfrecord.h>

using chorus::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = chorus::fuzz::scratch_file().hold(chorus::fuzz::as_view(data, size));
  std::vector<chorus::data::Element> elements;
  std::uint64_t count = 0;
  try {
    chorus::data::internal::CacheFileReader reader(path, "/CPU:0");
    count = reader.count();
    while (auto e = reader.next()) elements.push_back(std::move(*e));
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    return 0;
  }
  check(elements.size() == count, "as many elements as the footer counts");
  const std::vector<std::string> records = chorus::data::read_tfrecord_file(path);
  check(records.size() == count + 2, "header, elements, footer");
  check(records.front() == chorus::data::internal::kCacheHeader, "the header record");
  for (std::size_t i = 0; i < elements.size(); ++i)
    check(chorus::data::internal::encode_cache_element(elements[i]) == records[i + 1], "elements re-encode exactly");
  return 0;
}
