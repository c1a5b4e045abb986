// Replays inputs through one fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so the seed
// corpus and the inputs that once failed (regressions/) run as ordinary tests with the project's
// own compiler, with or without clang, and under scripts/sanitize.sh's sanitizers.
//
//   fuzz_replay_<target> <file or directory>...     (directories are walked; README.md is skipped)
//
// A target rejects a bad input with the documented chorus error and returns; a broken contract
// traps or lets an exception escape, which ends this program with a signal: the test fails, and the
// last "replay:" line names the input.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() != "README.md") inputs.push_back(e.path());
    } else {
      inputs.push_back(p);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 1;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs: each accepted or rejected with the documented error\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
