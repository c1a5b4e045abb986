// timeline::Span as an NVTX range (core/timeline.h): under an NVTX tool — here the injection
// library nvtx_injection.cc, loaded by NVTX's own loader from NVTX_INJECTION64_PATH, as Nsight
// Systems is — nested spans push "<category>/<name>" and pop in order, with the timeline off. A
// process of its own: the loader and chorus read the variable once, at the first range.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <chorus/core/timeline.h>

namespace chorus {
namespace {

TEST(Nvtx, SpansAreNvtxRangesUnderAnNvtxTool) {
#ifndef CHORUS_NVTX_INJECTION
  GTEST_SKIP() << "built without CUDA: no NVTX";
#else
  ASSERT_FALSE(timeline::enabled());
  setenv("NVTX_INJECTION64_PATH", CHORUS_NVTX_INJECTION, 1);
  {
    timeline::Span step("step", "train step");
    { timeline::Span layer("forward", "dense_1"); }
    timeline::Span optimizer("optimizer", "Adam");
  }
  void* lib = dlopen(CHORUS_NVTX_INJECTION, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "NVTX's loader did not load " << CHORUS_NVTX_INJECTION;
  using Read = void (*)(std::vector<std::string>*, int*);
  auto read = reinterpret_cast<Read>(dlsym(lib, "chorus_nvtx_test_read"));
  ASSERT_NE(read, nullptr);
  std::vector<std::string> pushed;
  int pops = 0;
  read(&pushed, &pops);
  EXPECT_EQ(pushed, (std::vector<std::string>{"step/train step", "forward/dense_1", "optimizer/Adam"}));
  EXPECT_EQ(pops, 3);
  dlclose(lib);
#endif
}

}  // namespace
}  // namespace chorus
