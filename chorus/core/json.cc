#include <chorus/core/error.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/strings.h>

#include <set>
#include <string>
#include <vector>

namespace chorus::internal {

namespace {

constexpr int kMaxDepth = 64;

// The path of object keys down to the current value, for messages: "cluster" > "worker".
std::string key_path(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) {
    if (k.empty() && out.empty()) continue;  // the root object
    out += (out.empty() ? "\"" : " > \"") + printable(k) + "\"";
  }
  return out.empty() ? "the top-level object" : "object " + out;
}

}  // namespace

Json parse_json(std::string_view text, std::string_view what) {
  // Per open object: its keys so far, and the key under which it sits in its parent.
  struct Open {
    std::set<std::string> keys;
    std::string name;
  };
  std::vector<Open> objects;
  std::vector<std::string> path;  // the key under which each open object sits
  std::string pending_key;        // the last key read: the name of an object opened next
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxDepth)
      throw InvalidArgumentError(
          str_cat(what, " is not valid JSON: arrays and objects nest deeper than ", kMaxDepth, " levels"));
    switch (event) {
      case E::object_start:
        objects.push_back({{}, pending_key});
        path.push_back(pending_key);
        pending_key.clear();
        break;
      case E::object_end:
        if (!objects.empty()) objects.pop_back();
        if (!path.empty()) path.pop_back();
        break;
      case E::array_start: pending_key.clear(); break;
      case E::key: {
        const std::string key = parsed.get<std::string>();
        if (!objects.empty() && !objects.back().keys.insert(key).second)
          throw InvalidArgumentError(
              str_cat(what, " is not valid JSON: key \"", printable(key), "\" appears twice in ", key_path(path)));
        pending_key = key;
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line L, column C: <problem>".
    std::string detail = e.what();
    const std::string lead = "parse error ";
    if (const auto at = detail.find(lead); at != std::string::npos) detail = detail.substr(at + lead.size());
    throw InvalidArgumentError(str_cat(what, " is not valid JSON ", printable(detail, 400)));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError(str_cat(what, " is not valid JSON: ", printable(e.what(), 400)));
  }
}

const char* json_kind(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::binary: return "binary data";
    case Json::value_t::discarded: return "nothing";
    default: return "a number";
  }
}

}  // namespace chorus::internal
