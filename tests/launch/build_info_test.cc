#include <chorus/launch/build_info.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

// The configure-time facts this test checks the run-time answers against come from CMake
// (tests/launch/CMakeLists.txt): which libraries the build found and the versions CMake saw.
namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(BuildInfo, VersionDecoding) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(cudnn_version_string(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_string(90102), "9.1.2");
  EXPECT_EQ(cudnn_version_string(8907), "8.9.7");
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(2804), "2.8.4");
}

TEST(BuildInfo, ComponentsInOrderAndMatchTheConfiguration) {
  const auto info = query_build_info();
  ASSERT_EQ(info.size(), 7u);
  const char* names[] = {"CUDA", "cuDNN", "cuBLAS", "NCCL", "MPI", "oneDNN", "GPUs visible"};
  const bool built[] = {EXPECT_CUDA, EXPECT_CUDNN, EXPECT_CUDA, EXPECT_NCCL, EXPECT_MPI, EXPECT_DNNL, EXPECT_CUDA};
  for (std::size_t i = 0; i < info.size(); ++i) {
    EXPECT_EQ(info[i].name, names[i]);
    EXPECT_EQ(info[i].compiled_in, built[i]) << names[i];
    if (i + 1 < info.size() && !built[i]) {
      EXPECT_EQ(info[i].version, "");
      EXPECT_THAT(format_component(info[i]), HasSubstr(std::string(names[i]) + ": not built ("));
    }
  }
  if (EXPECT_CUDA) {
    // CUDAToolkit_VERSION is major.minor.patch; the runtime reports major.minor.
    EXPECT_THAT(info[0].version, HasSubstr("runtime " EXPECT_CUDA_MAJOR_MINOR));
    EXPECT_THAT(info[2].version, MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  }
  if (EXPECT_CUDNN) {
    EXPECT_THAT(info[1].version, MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  }
  if (EXPECT_NCCL) {
    EXPECT_THAT(info[3].version, MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
  }
  if (EXPECT_MPI) {
    EXPECT_FALSE(info[4].version.empty());
    EXPECT_EQ(info[4].detail, "MPI standard " EXPECT_MPI_STANDARD);
  }
  if (EXPECT_DNNL) {
    EXPECT_EQ(info[5].version, EXPECT_DNNL_VERSION);
  }
  // The GPU count is a number (0 on a machine without a GPU, with the reason as detail).
  EXPECT_THAT(info[6].version, MatchesRegex("[0-9]+"));
  if (info[6].version == "0") {
    EXPECT_FALSE(info[6].detail.empty());
  }
}

TEST(BuildInfo, Formatting) {
  EXPECT_EQ(format_component({"NCCL", true, "2.28.9", ""}), "NCCL: 2.28.9");
  EXPECT_EQ(format_component({"cuDNN", true, "9.19.0", "compiled against 9.18.0"}),
            "cuDNN: 9.19.0 (compiled against 9.18.0)");
  EXPECT_EQ(format_component({"MPI", false, "", "configured without MPI"}), "MPI: not built (configured without MPI)");
  EXPECT_EQ(format_component({"GPUs visible", false, "0", "chorus was built without CUDA"}),
            "GPUs visible: 0 (chorus was built without CUDA)");
}

}  // namespace
}  // namespace chorus::launch
