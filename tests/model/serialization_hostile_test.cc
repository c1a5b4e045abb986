// model_from_json (model/serialization.h) on hostile and broken input (issue 43 item 4): every
// tf_keras-written seed of the fuzz corpus loads; its truncations and byte mutations raise only the
// documented errors (or load and write back stably); deep nesting, long chains listed backwards, a
// wide fan-in and a self-loop neither crash nor hang. tests/fuzz/model_json_fuzz.cc is the fuzzer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "tests/core/test_util.h"
#include <chorus/core/runtime.h>
#include <chorus/model/model.h>
#include <chorus/model/serialization.h>

namespace chorus {
namespace {

std::filesystem::path seeds() {
  return std::filesystem::path(CHORUS_SOURCE_ROOT) / "tests" / "fuzz" / "corpus" / "model_json_fuzz";
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Loads or raises a documented error; an accepted text writes back to a fixed point.
void load_or_reject(const std::string& json, const std::string& what) {
  try {
    auto m = model::model_from_json(json);
    const std::string ours = m->to_json();
    EXPECT_EQ(model::model_from_json(ours)->to_json(), ours) << what;
  } catch (const InvalidArgumentError&) {
  } catch (const ResourceExhaustedError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": undocumented exception " << typeid(e).name() << ": " << e.what();
  }
}

TEST(ModelJsonHostile, EveryTfKerasSeedLoadsAndWritesBackTheSameArchitecture) {
  chorus::internal::reset_runtime_for_testing();
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(seeds())) {
    const std::string json = read(e.path());
    std::unique_ptr<model::Model> m;
    ASSERT_NO_THROW(m = model::model_from_json(json)) << e.path();
    EXPECT_EQ(model::model_from_json(m->to_json())->to_json(), m->to_json()) << e.path();
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(ModelJsonHostile, TruncationsAndByteMutationsRaiseOnlyDocumentedErrors) {
  chorus::internal::reset_runtime_for_testing();
  const std::string seed = read(seeds() / "keras_functional_two_inputs_shared_nested");
  ASSERT_FALSE(seed.empty());
  for (std::size_t cut = 0; cut < seed.size(); cut += 97) load_or_reject(seed.substr(0, cut), "truncated");
  std::mt19937 rng(43);
  const std::string alphabet = "[]{}\",:0-.ex tfn\\\x01\xff";
  for (int i = 0; i < 150; ++i) {
    std::string s = seed;
    for (int k = 0; k < 1 + i % 3; ++k) {
      std::size_t pos = rng() % s.size();
      if (std::isdigit(static_cast<unsigned char>(s[pos]))) continue;  // sizes: see model_json_fuzz.cc
      s[pos] = alphabet[rng() % alphabet.size()];
      if (std::isdigit(static_cast<unsigned char>(s[pos]))) s[pos] = '0';
    }
    load_or_reject(s, "mutation " + std::to_string(i));
  }
}

TEST(ModelJsonHostile, DeepNestingAndALongChainListedBackwardsNeitherCrashNorHang) {
  chorus::internal::reset_runtime_for_testing();
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "[";
  EXPECT_THROW(model::model_from_json(deep), InvalidArgumentError);
  // A chain of 2000 Activation layers listed last-first: the reader orders the calls itself.
  std::string layers_json;
  const int n = 2000;
  for (int i = n; i >= 1; --i) {
    layers_json += R"({"class_name": "Activation", "config": {"name": "a)" + std::to_string(i) +
                   R"(", "activation": "relu"}, "name": "a)" + std::to_string(i) + R"(", "inbound_nodes": [[[")" +
                   (i == 1 ? std::string("x") : "a" + std::to_string(i - 1)) + R"(", 0, 0, {}]]]}, )";
  }
  const std::string json =
      R"({"class_name": "Functional", "config": {"name": "chain", "layers": [)" + layers_json +
      R"({"class_name": "InputLayer", "config": {"batch_input_shape": [null, 2], "dtype": "float32", "name": "x"}, )"
      R"("name": "x", "inbound_nodes": []}], "input_layers": [["x", 0, 0]], "output_layers": [["a)" +
      std::to_string(n) + R"(", 0, 0]]}})";
  auto m = model::model_from_json(json);
  EXPECT_EQ(m->layers().size(), static_cast<std::size_t>(n + 1));
}

TEST(ModelJsonHostile, AWideFanInAndASelfLoop) {
  chorus::internal::reset_runtime_for_testing();
  std::string refs;
  for (int i = 0; i < 1000; ++i) refs += std::string(i ? ", " : "") + R"(["x", 0, 0, {}])";
  const std::string head =
      R"({"class_name": "Functional", "config": {"name": "m", "layers": [{"class_name": "InputLayer", "config": )"
      R"({"batch_input_shape": [null, 2], "name": "x"}, "name": "x", "inbound_nodes": []}, )";
  auto m = model::model_from_json(head +
                                  R"({"class_name": "Add", "config": {"name": "sum"}, "name": "sum", )"
                                  R"("inbound_nodes": [[)" +
                                  refs +
                                  R"(]]}], "input_layers": [["x", 0, 0]], )"
                                  R"("output_layers": [["sum", 0, 0]]}})");
  const Tensor out = (*m)(Tensor::from_vector<float>({1, 2}, Shape{1, 2}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1000, 2000}));
  EXPECT_THROW_WITH(
      model::model_from_json(head + R"({"class_name": "Activation", "config": {"name": "a"}, "name": "a", )"
                                    R"("inbound_nodes": [[["a", 0, 0, {}]]]}], "input_layers": [["x", 0, 0]], )"
                                    R"("output_layers": [["a", 0, 0]]}})"),
      InvalidArgumentError, "cycle", "'a'");
}

}  // namespace
}  // namespace chorus
