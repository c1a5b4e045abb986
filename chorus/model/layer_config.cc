// LayerConfig (model/serialization.h): one layer's Keras config, its typed setters and getters
// and the messages that name the layer and the key.
#include <chorus/model/layer_config_internal.h>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layers.h>

namespace chorus::layers {

using chorus::internal::Json;
using chorus::internal::json_kind;
using chorus::internal::str_cat;

// ---- LayerConfig ----

LayerConfig::LayerConfig(std::string class_name, std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->class_name = std::move(class_name);
  impl_->name = std::move(name);
}
LayerConfig::~LayerConfig() = default;
LayerConfig::LayerConfig(const LayerConfig& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
LayerConfig& LayerConfig::operator=(const LayerConfig& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}

const std::string& LayerConfig::class_name() const { return impl_->class_name; }
const std::string& LayerConfig::name() const { return impl_->name; }

void LayerConfig::fail(const std::string& key, const std::string& what) const {
  throw InvalidArgumentError(str_cat("layer '", internal::printable(impl_->name, 200), "' (",
                                     internal::printable(impl_->class_name, 200), "): config key '", key, "' ", what));
}

void LayerConfig::set(const std::string& key, bool value) { impl_->config[key] = value; }
void LayerConfig::set(const std::string& key, std::int64_t value) { impl_->config[key] = value; }
void LayerConfig::set(const std::string& key, double value) { impl_->config[key] = value; }
void LayerConfig::set(const std::string& key, const std::string& value) { impl_->config[key] = value; }
void LayerConfig::set(const std::string& key, const std::vector<std::int64_t>& value) { impl_->config[key] = value; }
void LayerConfig::set(const std::string& key, const std::vector<std::vector<std::int64_t>>& value) {
  impl_->config[key] = value;
}
void LayerConfig::set_null(const std::string& key) { impl_->config[key] = nullptr; }
void LayerConfig::set_nulls(std::initializer_list<const char*> keys) {
  for (const char* k : keys) impl_->config[k] = nullptr;
}
void LayerConfig::set_batch_shape(const std::string& key, const std::vector<std::int64_t>& dims) {
  Json s = Json::array({nullptr});
  for (auto d : dims) s.push_back(d < 0 ? Json(nullptr) : Json(d));
  impl_->config[key] = std::move(s);
}
void LayerConfig::set_activation(const std::string& key, const std::string& activation) {
  impl_->config[key] = activation.empty() ? std::string("linear") : activation;
}

namespace {

Json seed_json(const std::optional<std::uint64_t>& seed) { return seed ? Json(*seed) : Json(nullptr); }

// Keras's serialize_keras_object for an initializer.
Json initializer_json(const initializers::InitializerSpec& s) {
  Json config = Json::object();
  if (s.class_name == "GlorotUniform" || s.class_name == "GlorotNormal" || s.class_name == "HeNormal" ||
      s.class_name == "HeUniform") {
    config["seed"] = seed_json(s.seed);
  } else if (s.class_name == "TruncatedNormal") {
    config["mean"] = s.mean;
    config["stddev"] = s.stddev;
    config["seed"] = seed_json(s.seed);
  } else if (s.class_name == "RandomUniform") {
    config["minval"] = s.minval;
    config["maxval"] = s.maxval;
    config["seed"] = seed_json(s.seed);
  } else if (s.class_name == "Constant") {
    config["value"] = s.value;
  }
  Json out = Json::object();
  out["module"] = "keras.initializers";
  out["class_name"] = s.class_name;
  out["config"] = std::move(config);
  out["registered_name"] = nullptr;
  return out;
}

}  // namespace

void LayerConfig::set_initializer(const std::string& key, const initializers::Initializer& init) {
  std::optional<initializers::InitializerSpec> spec = initializers::describe(init);
  if (!spec)
    fail(key,
         "is a function of your own; to_json writes only the initializers of model/initializers.h "
         "(glorot_uniform, he_normal, random_uniform, zeros, ones, constant)");
  impl_->config[key] = initializer_json(*spec);
}

bool LayerConfig::has(const std::string& key) const { return impl_->config.contains(key); }
bool LayerConfig::is_null(const std::string& key) const {
  auto it = impl_->config.find(key);
  return it == impl_->config.end() || it->is_null();
}

bool LayerConfig::is_int(const std::string& key) const {
  auto it = impl_->config.find(key);
  return it != impl_->config.end() && it->is_number_integer();
}
bool LayerConfig::is_list_of_lists(const std::string& key) const {
  auto it = impl_->config.find(key);
  return it != impl_->config.end() && it->is_array() && !it->empty() && (*it)[0].is_array();
}

namespace {

const Json& need(const LayerConfig& c, const Json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end()) c.fail(key, "is missing");
  return *it;
}

std::int64_t as_int(const LayerConfig& c, const std::string& key, const Json& v) {
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) c.fail(key, "is out of range");
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (!v.is_number_integer()) c.fail(key, str_cat("must be an integer, got ", json_kind(v)));
  return v.get<std::int64_t>();
}

}  // namespace

std::int64_t LayerConfig::get_int(const std::string& key) const {
  return as_int(*this, key, need(*this, impl_->config, key));
}
std::int64_t LayerConfig::get_int(const std::string& key, std::int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double LayerConfig::get_double(const std::string& key) const {
  const Json& v = need(*this, impl_->config, key);
  if (!v.is_number()) fail(key, str_cat("must be a number, got ", json_kind(v)));
  return v.get<double>();
}
double LayerConfig::get_double(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}
bool LayerConfig::get_bool(const std::string& key) const {
  const Json& v = need(*this, impl_->config, key);
  if (!v.is_boolean()) fail(key, str_cat("must be a boolean, got ", json_kind(v)));
  return v.get<bool>();
}
bool LayerConfig::get_bool(const std::string& key, bool fallback) const { return has(key) ? get_bool(key) : fallback; }
std::string LayerConfig::get_string(const std::string& key) const {
  const Json& v = need(*this, impl_->config, key);
  if (!v.is_string()) fail(key, str_cat("must be a string, got ", json_kind(v)));
  return v.get<std::string>();
}
std::string LayerConfig::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::string LayerConfig::get_string_in(const std::string& key, const std::string& fallback,
                                       std::initializer_list<const char*> allowed) const {
  const std::string v = get_string(key, fallback);
  for (const char* a : allowed)
    if (v == a) return v;
  fail(key, str_cat("is '", internal::printable(v, 100), "'; use one of: ",
                    internal::join(std::vector<std::string>(allowed.begin(), allowed.end()), {.quote = "'"})));
}

std::vector<std::int64_t> LayerConfig::get_int_list(const std::string& key, std::size_t size) const {
  const Json& v = need(*this, impl_->config, key);
  if (size > 0 && v.is_number_integer()) return std::vector<std::int64_t>(size, as_int(*this, key, v));
  if (!v.is_array()) fail(key, str_cat("must be a list of integers, got ", json_kind(v)));
  if (size > 0 && v.size() != size) fail(key, str_cat("must have ", size, " entries, got ", v.size()));
  std::vector<std::int64_t> out;
  for (const Json& e : v) out.push_back(as_int(*this, key, e));
  return out;
}

std::vector<std::vector<std::int64_t>> LayerConfig::get_int_lists(const std::string& key) const {
  const Json& v = need(*this, impl_->config, key);
  if (!v.is_array()) fail(key, str_cat("must be a list of lists of integers, got ", json_kind(v)));
  std::vector<std::vector<std::int64_t>> out;
  for (const Json& row : v) {
    if (!row.is_array()) fail(key, str_cat("must be a list of lists of integers, has ", json_kind(row)));
    out.emplace_back();
    for (const Json& e : row) out.back().push_back(as_int(*this, key, e));
  }
  return out;
}

std::string LayerConfig::get_activation(const std::string& key) const {
  if (is_null(key)) return "";
  const Json& v = need(*this, impl_->config, key);
  std::string name;
  if (v.is_string()) {
    name = v.get<std::string>();
  } else if (v.is_object() && v.contains("class_name") && v["class_name"].is_string()) {
    name = v["class_name"].get<std::string>();  // Keras 3's serialized function
  } else {
    fail(key, str_cat("must be an activation name, got ", json_kind(v)));
  }
  if (name == "linear") return "";
  try {
    check_activation(name);
  } catch (const InvalidArgumentError& e) {
    fail(key, e.what());
  }
  return name;
}

initializers::Initializer LayerConfig::get_initializer(const std::string& key) const {
  const Json& v = need(*this, impl_->config, key);
  std::string cls;
  Json config = Json::object();
  if (v.is_string()) {
    cls = v.get<std::string>();
  } else if (v.is_object() && v.contains("class_name") && v["class_name"].is_string()) {
    cls = v["class_name"].get<std::string>();
    if (v.contains("config")) config = v["config"];
    if (!config.is_object()) fail(key, str_cat("has a config that must be an object, got ", json_kind(config)));
  } else {
    fail(key, str_cat("must be an initializer (an object with class_name), got ", json_kind(v)));
  }
  LayerConfig inner(impl_->class_name, impl_->name);
  inner.impl_->config = config;
  const std::string where = key + "." + "config";
  auto seed = [&]() -> std::optional<std::uint64_t> {
    if (inner.is_null("seed")) return std::nullopt;
    const std::int64_t s = inner.get_int("seed");
    if (s < 0) fail(where, str_cat("seed must be >= 0, got ", s));
    return static_cast<std::uint64_t>(s);
  };
  if (cls == "GlorotUniform" || cls == "glorot_uniform") return initializers::glorot_uniform(seed());
  if (cls == "HeNormal" || cls == "he_normal") return initializers::he_normal(seed());
  if (cls == "GlorotNormal" || cls == "glorot_normal") return initializers::glorot_normal(seed());
  if (cls == "HeUniform" || cls == "he_uniform") return initializers::he_uniform(seed());
  if (cls == "TruncatedNormal" || cls == "truncated_normal") {
    const double stddev = inner.get_double("stddev", 0.05);
    if (!(stddev > 0)) fail(key, str_cat("has stddev ", stddev, ", which must be > 0"));
    return initializers::truncated_normal(inner.get_double("mean", 0.0), stddev, seed());
  }
  if (cls == "Zeros" || cls == "zeros") return initializers::zeros();
  if (cls == "Ones" || cls == "ones") return initializers::ones();
  if (cls == "Constant" || cls == "constant") return initializers::constant(inner.get_double("value", 0.0));
  if (cls == "RandomUniform" || cls == "random_uniform") {
    const double lo = inner.get_double("minval", -0.05), hi = inner.get_double("maxval", 0.05);
    if (!(lo < hi)) fail(key, str_cat("has minval ", lo, " >= maxval ", hi));
    return initializers::random_uniform(lo, hi, seed());
  }
  fail(key, str_cat("names initializer '", internal::printable(cls, 100),
                    "', which chorus does not have; it has GlorotUniform, GlorotNormal, HeNormal, HeUniform, "
                    "TruncatedNormal, RandomUniform, Zeros, Ones, Constant"));
}

initializers::Initializer LayerConfig::get_initializer(const std::string& key,
                                                       initializers::Initializer fallback) const {
  return is_null(key) ? std::move(fallback) : get_initializer(key);
}

void LayerConfig::require_null(const std::string& key) const {
  if (!is_null(key))
    fail(key, str_cat("is ", internal::printable(impl_->config[key].dump(), 200),
                      "; chorus has no such feature, only null is accepted"));
}

void LayerConfig::require_nulls(std::initializer_list<const char*> keys) const {
  for (const char* k : keys) require_null(k);
}

void LayerConfig::require_initializer(const std::string& key, const std::string& class_name) const {
  if (is_null(key)) return;
  const auto spec = initializers::describe(get_initializer(key));
  const bool constant_as = spec && spec->class_name == "Constant" &&
                           ((class_name == "Zeros" && spec->value == 0) || (class_name == "Ones" && spec->value == 1));
  if (!spec || (spec->class_name != class_name && !constant_as))
    fail(key, str_cat("is ", spec ? spec->class_name : std::string("?"), "; chorus's ", impl_->class_name,
                      " supports only ", class_name, " here"));
}

void LayerConfig::require(const std::string& key, const std::string& value) const {
  if (has(key) && get_string(key) != value)
    fail(key, str_cat("is '", internal::printable(get_string(key), 100), "'; chorus supports only '", value, "'"));
}

void LayerConfig::require(const std::string& key, bool value) const {
  if (has(key) && get_bool(key) != value)
    fail(key, str_cat("is ", value ? "false" : "true", "; chorus supports only ", value ? "true" : "false"));
}

const std::vector<std::vector<std::int64_t>>& LayerConfig::build_input_shapes() const { return impl_->build_shapes; }

std::vector<std::string> LayerConfig::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : impl_->config.items()) out.push_back(k);
  return out;
}

}  // namespace chorus::layers
