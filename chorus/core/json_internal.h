// JSON for chorus's own files and variables (TF_CONFIG, timeline traces, bench output), through
// nlohmann-json (Debian nlohmann-json3-dev, header only). Private to chorus: no installed header
// includes this one, so nlohmann-json is not part of the package's interface.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace chorus::internal {

// Objects keep their keys in document order (TF_CONFIG's job order, a trace's fields).
using Json = nlohmann::ordered_json;

// Parses one JSON document (RFC 8259). Beyond nlohmann's own checks: a key repeated in one object
// and nesting deeper than 64 are errors (where nlohmann keeps the last value / recurses on).
// Every error is InvalidArgumentError naming `what` and where it is wrong, e.g.
//   "TF_CONFIG is not valid JSON at line 1, column 7: syntax error while parsing object separator -
//    unexpected number literal; expected ':'"
//   "TF_CONFIG is not valid JSON: key "worker" appears twice in object "cluster""
// Bytes of the text reach the message only as printable() escapes.
Json parse_json(std::string_view text, std::string_view what = "JSON");

// "an object", "an array", "a string", "a number", "a boolean", "null": for messages.
const char* json_kind(const Json& value);

}  // namespace chorus::internal
