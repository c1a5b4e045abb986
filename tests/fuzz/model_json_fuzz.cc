// libFuzzer target: Keras's architecture JSON, model::model_from_json (model/serialization.h), which
// parses with chorus::internal::parse_json and rebuilds the layers and their graph. Input: the text.
// Seeds: tf_keras 2.21's own to_json of functional (two inputs, a shared layer, nested models) and
// Sequential models (corpus/model_json_fuzz/).
//
// Contract: InvalidArgumentError (bad JSON, an unknown class, a wrong key, a graph that references
// what is not there or has a cycle) or ResourceExhaustedError (over kMaxModelJsonBytes, or an
// allocation past a memory limit). An accepted model writes JSON that reads back to the same JSON.
//
// model_from_json allocates the model the JSON describes (as Keras does): "units": 10^9 is a
// legitimate request for a huge Dense layer, not a reader bug. So that one execution stays small,
// this target skips inputs holding an integer beyond ±kMaxInt (every size of the seeds fits).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/core/json_internal.h>
#include <chorus/model/model.h>
#include <chorus/model/serialization.h>

using chorus::fuzz::check;

namespace {

constexpr std::int64_t kMaxInt = 32;

bool small_numbers(const chorus::internal::Json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxInt);
  if (v.is_number_integer()) return std::llabs(v.get<std::int64_t>()) <= kMaxInt;
  if (v.is_structured())
    for (const auto& e : v)
      if (!small_numbers(e)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string json(chorus::fuzz::as_view(data, size));
  try {
    if (!small_numbers(chorus::internal::parse_json(json))) return 0;
  } catch (const chorus::Error&) {
    // model_from_json must reject it the same way: fall through.
  }
  std::unique_ptr<chorus::model::Model> m;
  try {
    m = chorus::model::model_from_json(json);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError, chorus::ResourceExhaustedError>(e);
    return 0;
  }
  check(m != nullptr, "an accepted JSON gives a model");
  const std::string ours = m->to_json();
  const std::string again = chorus::model::model_from_json(ours)->to_json();
  check(again == ours, "to_json(model_from_json(to_json(m))) == to_json(m)");
  return 0;
}
