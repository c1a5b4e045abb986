#include <chorus/core/device_spec.h>

#include <cctype>
#include <charconv>
#include <limits>
#include <vector>

#include <chorus/core/error.h>

namespace chorus {
namespace {

using internal::str_cat;

constexpr std::string_view kAcceptedForms =
    "Accepted forms: \"/cpu:0\", \"GPU:1\", \"gpu\", \"/device:GPU:0\", \"/device:GPU:*\", "
    "\"/job:localhost/replica:0/task:0/device:GPU:0\", \"/job:worker/task:1/gpu:2\", "
    "\"/physical_device:GPU:0\"; device types are CPU and GPU (any case), indices are integers >= 0 "
    "or \"*\", the leading \"/\" is optional";

// Device types other TensorFlow builds have. Naming one gets a message that says it is a real
// type chorus lacks, rather than a malformed string.
constexpr std::string_view kOtherTfTypes[] = {"TPU", "TPU_SYSTEM", "XLA_CPU", "XLA_GPU", "DEFAULT"};

[[noreturn]] void fail(std::string_view text, std::string_view part, std::string_view problem) {
  throw InvalidArgumentError(
      str_cat("invalid device spec '", text, "': ", problem, " (in '", part, "'). ", kAcceptedForms));
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const std::size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// Parses one part's pieces. Holds the whole text so every error can quote it.
class PartParser {
 public:
  PartParser(std::string_view text, std::string_view part) : text_(text), part_(part) {}

  [[noreturn]] void fail(std::string_view problem) const { ::chorus::fail(text_, part_, problem); }

  // "*" is TF's wildcard and leaves the field unset. Only plain digits are accepted: from_chars
  // alone would take "-1" and stop quietly at "1x".
  std::optional<int> number(std::string_view field, std::string_view what) const {
    if (field == "*") return std::nullopt;
    if (field.empty()) fail(str_cat(what, " is empty; give an integer >= 0 or \"*\""));
    for (char c : field)
      if (!std::isdigit(static_cast<unsigned char>(c))) fail(str_cat(what, " '", field, "' is not an integer >= 0"));
    int value = 0;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (ec != std::errc() || end != field.data() + field.size())
      fail(str_cat(what, " '", field, "' is out of range (at most ", std::numeric_limits<int>::max(), ")"));
    return value;
  }

  // TF's job names: a letter, then letters, digits and '_'.
  std::optional<std::string> job(std::string_view field) const {
    if (field == "*") return std::nullopt;
    if (field.empty()) fail("the job name is empty");
    bool ok = std::isalpha(static_cast<unsigned char>(field[0])) != 0;
    for (char c : field) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) fail(str_cat("job name '", field, "' must be a letter followed by letters, digits or '_'"));
    return std::string(field);
  }

  std::optional<std::string> device_type(std::string_view field) const {
    if (field == "*") return std::nullopt;
    if (field.empty()) fail("the device type is empty");
    std::string t = upper(field);
    if (t == "CPU" || t == "GPU") return t;
    fail(str_cat("device type '", field, "' is not supported: chorus has CPU and GPU devices"));
  }

 private:
  std::string_view text_;
  std::string_view part_;
};

bool is_other_tf_type(std::string_view name) {
  const std::string u = upper(name);
  for (std::string_view t : kOtherTfTypes)
    if (u == t) return true;
  return false;
}

}  // namespace

DeviceSpec DeviceSpec::parse(std::string_view text) {
  DeviceSpec spec;
  std::string_view rest = text;
  if (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  if (rest.empty()) return spec;  // "" and "/" name no fields

  // Each field may appear once: "/gpu:0/gpu:1" is ambiguous, and TF's Python parser rejects a
  // repeated device type too. Repeats of the same value are rejected as well, for simplicity.
  bool seen_job = false, seen_replica = false, seen_task = false, seen_device = false;
  std::string_view device_part;
  for (std::string_view part : split(rest, '/')) {
    const PartParser p(text, part);
    if (part.empty()) p.fail("empty part between '/' separators");
    const std::vector<std::string_view> f = split(part, ':');
    const std::string_view key = f[0];
    auto once = [&](bool& seen, std::string_view what) {
      if (seen) p.fail(str_cat(what, " is given twice"));
      seen = true;
    };
    if (key == "job" || key == "replica" || key == "task") {
      if (f.size() != 2) p.fail(str_cat("'", key, "' takes exactly one value, as in '", key, ":0'"));
      if (key == "job") {
        once(seen_job, "the job");
        spec.job = p.job(f[1]);
      } else if (key == "replica") {
        once(seen_replica, "the replica");
        spec.replica = p.number(f[1], "replica");
      } else {
        once(seen_task, "the task");
        spec.task = p.number(f[1], "task");
      }
    } else if (key == "device" || key == "physical_device") {
      if (f.size() < 2 || f.size() > 3)
        p.fail(str_cat("'", key, "' takes a type and an optional index, as in '", key, ":GPU:0'"));
      once(seen_device, "the device");
      device_part = part;
      spec.physical = key == "physical_device";
      spec.type = p.device_type(f[1]);
      if (f.size() == 3) spec.index = p.number(f[2], "device index");
    } else {
      // Legacy short form "gpu:1" / "CPU". "*" as a bare type would read as a field name, so the
      // wildcard type is only accepted after "device:".
      const std::string t = upper(key);
      if (t != "CPU" && t != "GPU") {
        if (is_other_tf_type(key))
          p.fail(str_cat("device type '", key, "' is not supported: chorus has CPU and GPU devices"));
        p.fail(str_cat("'", key,
                       "' is neither a field (job, replica, task, device, physical_device) nor a device "
                       "type: chorus has CPU and GPU devices"));
      }
      if (f.size() > 2) p.fail(str_cat("'", key, "' takes one optional index, as in '", key, ":0'"));
      once(seen_device, "the device");
      spec.type = t;
      if (f.size() == 2) spec.index = p.number(f[1], "device index");
    }
  }
  // Physical devices are named per process ("/physical_device:GPU:0" in list_physical_devices),
  // so a job, replica or task has no meaning for them.
  if (spec.physical && (seen_job || seen_replica || seen_task))
    fail(text, device_part, "a physical_device name cannot have job, replica or task fields");
  return spec;
}

bool DeviceSpec::matches(const DeviceSpec& other) const {
  auto ok = [](const auto& mine, const auto& theirs) { return !mine.has_value() || mine == theirs; };
  // Logical and physical names are separate namespaces, so `physical` must agree even when every
  // other field is unset.
  return physical == other.physical && ok(job, other.job) && ok(replica, other.replica) && ok(task, other.task) &&
         ok(type, other.type) && ok(index, other.index);
}

DeviceSpec DeviceSpec::merged_with(const DeviceSpec& defaults) const {
  DeviceSpec out = *this;
  if (!out.job) out.job = defaults.job;
  if (!out.replica) out.replica = defaults.replica;
  if (!out.task) out.task = defaults.task;
  // Field by field, exactly as TF's make_merged_spec: "/gpu" merged with "/cpu:1" gives GPU:1,
  // not GPU:* — the index is not tied to the type it came with.
  if (!out.type) out.type = defaults.type;
  if (!out.index) out.index = defaults.index;
  // `physical` is a flag rather than an optional field; a physical name on either side wins.
  out.physical = physical || defaults.physical;
  return out;
}

std::string DeviceSpec::to_string() const {
  std::string out;
  // Appends piece by piece: `"literal" + std::to_string(...)` trips a GCC 12 -Wrestrict false positive.
  if (job) out.append("/job:").append(*job);
  if (replica) out.append("/replica:").append(std::to_string(*replica));
  if (task) out.append("/task:").append(std::to_string(*task));
  if (type || index || physical) {
    out.append(physical ? "/physical_device:" : "/device:");
    out.append(type ? *type : "*");
    out.append(":").append(index ? std::to_string(*index) : "*");
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const DeviceSpec& spec) { return os << spec.to_string(); }

std::string canonical_logical_name(std::string_view type, int index, int task) {
  return str_cat("/job:localhost/replica:0/task:", task, "/device:", upper(type), ":", index);
}

std::string canonical_physical_name(std::string_view type, int index) {
  return str_cat("/physical_device:", upper(type), ":", index);
}

}  // namespace chorus
