// LayerConfig's storage, shared by layer_config.cc (the typed setters and getters) and
// serialization.cc (which moves configs in and out of the model JSON). Private to chorus: no
// installed header includes it (it includes nlohmann-json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/core/json_internal.h>
#include <chorus/model/serialization.h>

namespace chorus::layers {

struct LayerConfig::Impl {
  std::string class_name, name;
  internal::Json config = internal::Json::object();
  std::vector<std::vector<std::int64_t>> build_shapes;
};

}  // namespace chorus::layers
