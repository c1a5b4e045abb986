#include <chorus/distribute/cluster_resolver.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/tensor.h>

#if defined(CHORUS_WITH_MPI)
#include <mpi.h>

#include <chorus/collective/mpi.h>
#endif

namespace chorus::distribute {

using chorus::internal::str_cat;

// ---------------------------------------------------------------------------------------------
// JSON: a small recursive-descent reader (TF_CONFIG is a few hundred bytes; no dependency needed).
namespace internal {
namespace {

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  JsonValue document() {
    skip_space();
    JsonValue v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& problem) const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw InvalidArgumentError(str_cat(what_, " is not valid JSON: ", problem, " at position ", pos_, " (line ", line,
                                       ", column ", column, ")"));
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_space() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(at_end() ? str_cat("expected '", c, "' but the text ended") : str_cat("expected '", c, "'"));
    ++pos_;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail(str_cat("expected '", word, "'"));
    pos_ += word.size();
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) fail(str_cat("nesting deeper than ", kMaxDepth));
    JsonValue v;
    switch (peek()) {
      case '{': object(v, depth); break;
      case '[': array(v, depth); break;
      case '"':
        v.kind = JsonValue::Kind::kString;
        v.string = string();
        break;
      case 't':
        literal("true");
        v.kind = JsonValue::Kind::kBool;
        v.boolean = true;
        break;
      case 'f':
        literal("false");
        v.kind = JsonValue::Kind::kBool;
        break;
      case 'n': literal("null"); break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          v.kind = JsonValue::Kind::kNumber;
          v.number = number();
        } else {
          fail(at_end() ? "expected a value but the text ended" : "expected a value");
        }
    }
    return v;
  }

  void object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kObject;
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      if (peek() != '"') fail("expected a string key");
      std::string key = string();
      skip_space();
      expect(':');
      skip_space();
      v.object.emplace_back(std::move(key), value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kArray;
    expect('[');
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      v.array.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      u <<= 4;
      if (c >= '0' && c <= '9')
        u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        u |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("expected 4 hex digits after \\u");
      ++pos_;
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string (escape it)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
            if (s_.substr(pos_, 2) != "\\u") fail("a high surrogate \\u escape without its low half");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("a high surrogate \\u escape without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a lone low surrogate \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail("invalid escape in a string");
      }
    }
  }

  double number() {
    const std::size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("expected a digit");
    }
    if (peek() == '.') {
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit after '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit in the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    const std::string text(s_.substr(start, pos_ - start));
    return std::strtod(text.c_str(), nullptr);
  }

  std::string_view s_;
  std::string_view what_;
  std::size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

JsonValue parse_json(std::string_view text, std::string_view what) { return JsonParser(text, what).document(); }

bool mpi_initialized() {
#if defined(CHORUS_WITH_MPI)
  // Both may be called at any time, from any thread (MPI-4.0 section 11.2.1).
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS) return false;
  return initialized != 0 && finalized == 0;
#else
  return false;
#endif
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs.find(job);
  return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
}

std::string ClusterSpec::to_string() const {
  std::ostringstream os;
  os << "{";
  bool first_job = true;
  for (const auto& [job, tasks] : jobs) {
    os << (first_job ? "" : ", ") << "\"" << job << "\": [";
    for (std::size_t i = 0; i < tasks.size(); ++i) os << (i ? ", " : "") << "\"" << tasks[i] << "\"";
    os << "]";
    first_job = false;
  }
  os << "}";
  return os.str();
}

ClusterResolver::ClusterResolver() { spec_.jobs["worker"] = {"localhost"}; }

std::string ClusterResolver::to_string() const {
  return str_cat("worker ", worker_index_, " of ", num_workers_, is_chief() ? " (chief)" : "", " (task ", task_type_,
                 ":", task_id_, ", local rank ", local_rank_, " of ", local_size_, ", from ", source_, ")");
}

namespace {

using internal::JsonValue;

const char* kind_name(JsonValue::Kind k) {
  switch (k) {
    case JsonValue::Kind::kNull: return "null";
    case JsonValue::Kind::kBool: return "a boolean";
    case JsonValue::Kind::kNumber: return "a number";
    case JsonValue::Kind::kString: return "a string";
    case JsonValue::Kind::kArray: return "an array";
    case JsonValue::Kind::kObject: return "an object";
  }
  return "?";
}

std::string host_of(const std::string& address) {
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// An integer environment variable, or nullopt when unset; InvalidArgumentError when not an int.
std::optional<int> env_int(const EnvLookup& env, const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(v->c_str(), &end, 10);
  CHORUS_REQUIRE(!v->empty() && end != nullptr && *end == '\0' && errno == 0 && n >= 0 && n <= 1 << 24,
                 InvalidArgumentError, "environment variable ", name, "='", *v,
                 "' is not a non-negative integer (it is set by the MPI launcher; unset it or fix it)");
  return static_cast<int>(n);
}

}  // namespace

ClusterResolver ClusterResolver::from_tf_config(std::string_view json) {
  const JsonValue root = internal::parse_json(json, "TF_CONFIG");
  CHORUS_REQUIRE(root.kind == JsonValue::Kind::kObject, InvalidArgumentError,
                 "TF_CONFIG must be a JSON object like {\"cluster\": {\"worker\": [\"host:port\", ...]}, \"task\": "
                 "{\"type\": \"worker\", \"index\": 0}}, got ",
                 kind_name(root.kind));
  const JsonValue* cluster = root.find("cluster");
  CHORUS_REQUIRE(cluster != nullptr && cluster->kind == JsonValue::Kind::kObject && !cluster->object.empty(),
                 InvalidArgumentError,
                 "TF_CONFIG needs a non-empty \"cluster\" object mapping job names to address "
                 "lists, e.g. {\"worker\": [\"host0:2222\", \"host1:2222\"]}");
  ClusterResolver r;
  r.source_ = "TF_CONFIG";
  r.spec_.jobs.clear();
  std::set<std::string> addresses;
  for (const auto& [job, tasks] : cluster->object) {
    CHORUS_REQUIRE(tasks.kind == JsonValue::Kind::kArray, InvalidArgumentError, "TF_CONFIG: cluster job \"", job,
                   "\" must be an array of \"host:port\" strings, got ", kind_name(tasks.kind));
    CHORUS_REQUIRE(!r.spec_.jobs.count(job), InvalidArgumentError, "TF_CONFIG: cluster job \"", job,
                   "\" appears twice");
    auto& list = r.spec_.jobs[job];
    for (const JsonValue& t : tasks.array) {
      CHORUS_REQUIRE(t.kind == JsonValue::Kind::kString && !t.string.empty(), InvalidArgumentError,
                     "TF_CONFIG: the tasks of job \"", job, "\" must be non-empty \"host:port\" strings, got ",
                     kind_name(t.kind));
      CHORUS_REQUIRE(addresses.insert(t.string).second, InvalidArgumentError, "TF_CONFIG: address \"", t.string,
                     "\" is listed twice in the cluster (every task needs its own address)");
      list.push_back(t.string);
    }
  }
  const int chiefs = r.spec_.num_tasks("chief");
  const int workers = r.spec_.num_tasks("worker");
  CHORUS_REQUIRE(chiefs <= 1, InvalidArgumentError, "TF_CONFIG: the cluster has ", chiefs,
                 " chief tasks; at most one is allowed");
  CHORUS_REQUIRE(chiefs + workers >= 1, InvalidArgumentError, "TF_CONFIG: the cluster ", r.spec_.to_string(),
                 " has no \"chief\" or \"worker\" job");

  const JsonValue* task = root.find("task");
  CHORUS_REQUIRE(task != nullptr && task->kind == JsonValue::Kind::kObject, InvalidArgumentError,
                 "TF_CONFIG needs a \"task\" object like {\"type\": \"worker\", \"index\": 0}");
  const JsonValue* type = task->find("type");
  const JsonValue* index = task->find("index");
  CHORUS_REQUIRE(type != nullptr && type->kind == JsonValue::Kind::kString, InvalidArgumentError,
                 "TF_CONFIG: task.type must be a string naming a job of the cluster (", r.spec_.to_string(), ")");
  const double idx = index == nullptr ? 0.0 : index->number;
  CHORUS_REQUIRE(index == nullptr || (index->kind == JsonValue::Kind::kNumber && idx >= 0 && std::floor(idx) == idx),
                 InvalidArgumentError, "TF_CONFIG: task.index must be a non-negative integer");
  const int n_tasks = r.spec_.num_tasks(type->string);
  CHORUS_REQUIRE(r.spec_.jobs.count(type->string), InvalidArgumentError, "TF_CONFIG: task.type \"", type->string,
                 "\" is not a job of the cluster ", r.spec_.to_string());
  CHORUS_REQUIRE(idx < n_tasks, InvalidArgumentError, "TF_CONFIG: task.index ", idx, " is out of range: job \"",
                 type->string, "\" has ", n_tasks, " task(s) (valid: 0..", n_tasks - 1, ")");
  r.task_type_ = type->string;
  r.task_id_ = static_cast<int>(idx);
  r.num_workers_ = chiefs + workers;
  // TF's worker order: chief first, then the workers.
  std::vector<std::string> order;
  for (const char* job : {"chief", "worker"})
    if (r.spec_.jobs.count(job))
      for (const auto& a : r.spec_.jobs.at(job)) order.push_back(a);
  if (r.task_type_ == "chief")
    r.worker_index_ = 0;
  else if (r.task_type_ == "worker")
    r.worker_index_ = chiefs + r.task_id_;
  else
    r.worker_index_ = -1;
  const std::string my_host = host_of(r.spec_.jobs.at(r.task_type_)[static_cast<std::size_t>(r.task_id_)]);
  r.local_rank_ = 0;
  r.local_size_ = 0;
  for (std::size_t w = 0; w < order.size(); ++w) {
    if (host_of(order[w]) != my_host) continue;
    if (r.worker_index_ >= 0 && static_cast<int>(w) < r.worker_index_) ++r.local_rank_;
    ++r.local_size_;
  }
  if (r.worker_index_ < 0) r.local_size_ = std::max(r.local_size_, 1);
  return r;
}

std::optional<ClusterResolver> ClusterResolver::from_mpi_launcher(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return env::get(n); });
  struct Names {
    const char* source;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
  };
  for (const Names& n : {Names{"Open MPI environment", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                         Names{"PMI environment", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}}) {
    const auto size = env_int(env, n.size);
    if (!size) continue;
    const auto rank = env_int(env, n.rank);
    CHORUS_REQUIRE(rank.has_value(), InvalidArgumentError, n.size, " is set (", *size, ") but ", n.rank, " is not");
    CHORUS_REQUIRE(*size >= 1 && *rank < *size, InvalidArgumentError, n.rank, "=", *rank, " must be below ", n.size,
                   "=", *size);
    const auto local_rank = env_int(env, n.local_rank);
    const auto local_size = env_int(env, n.local_size);
    ClusterResolver r;
    r.source_ = n.source;
    r.num_workers_ = *size;
    r.worker_index_ = *rank;
    r.task_id_ = *rank;
    r.local_rank_ = local_rank.value_or(0);
    r.local_size_ = local_size.value_or(local_rank ? *local_rank + 1 : 1);
    CHORUS_REQUIRE(r.local_size_ >= 1 && r.local_rank_ < r.local_size_ && r.local_size_ <= *size, InvalidArgumentError,
                   n.local_rank, "=", r.local_rank_, " and ", n.local_size, "=", r.local_size_,
                   " are inconsistent (need local_rank < local_size <= ", n.size, "=", *size, ")");
    r.spec_.jobs.clear();
    auto& workers = r.spec_.jobs["worker"];
    for (int i = 0; i < *size; ++i) workers.push_back(str_cat("mpi:rank", i));
    return r;
  }
  return std::nullopt;
}

ClusterResolver ClusterResolver::from_mpi() {
#if defined(CHORUS_WITH_MPI)
  // Through the collective layer (its MPI lock, error checks and timeouts), not raw MPI calls.
  auto comm = collective::make_mpi_communicator({.validate = false, .timeout = std::chrono::seconds(60)});
  ClusterResolver r;
  r.source_ = "MPI";
  r.num_workers_ = comm->size();
  r.worker_index_ = comm->rank();
  r.task_id_ = comm->rank();
  const std::string name = host_name_or("unknown-host");
  // Host names, all-gathered as fixed 256-byte records (int64 words: a dtype every backend has).
  constexpr std::int64_t kWords = 32;
  std::vector<std::int64_t> mine(kWords, 0);
  std::memcpy(mine.data(), name.data(), std::min<std::size_t>(name.size(), kWords * 8 - 1));
  Tensor in = Tensor::from_vector<std::int64_t>(mine, {kWords}, "/cpu:0");
  Tensor all = Tensor::empty({kWords * comm->size()}, DType::kInt64, "/cpu:0");
  comm->all_gather(in, all, {.timeout = std::chrono::seconds(60)})->wait(std::chrono::seconds(60));
  const std::vector<std::int64_t> words = all.to_vector<std::int64_t>();
  std::vector<std::string> hosts;
  for (int i = 0; i < comm->size(); ++i) hosts.emplace_back(reinterpret_cast<const char*>(words.data() + i * kWords));
  r.local_rank_ = 0;
  r.local_size_ = 0;
  for (int i = 0; i < comm->size(); ++i) {
    if (hosts[static_cast<std::size_t>(i)] != hosts[static_cast<std::size_t>(comm->rank())]) continue;
    if (i < comm->rank()) ++r.local_rank_;
    ++r.local_size_;
  }
  r.spec_.jobs.clear();
  auto& workers = r.spec_.jobs["worker"];
  for (int i = 0; i < comm->size(); ++i) workers.push_back(str_cat("mpi:rank", i));
  return r;
#else
  throw UnavailableError(
      "ClusterResolver::from_mpi: this build has no MPI (configure with MPI found, "
      "CHORUS_ENABLE_MPI=ON)");
#endif
}

ClusterResolver ClusterResolver::from_environment(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return env::get(n); });
  if (auto tf_config = env("TF_CONFIG"); tf_config && !tf_config->empty()) return from_tf_config(*tf_config);
  if (auto r = from_mpi_launcher(env)) return *r;
#if defined(CHORUS_WITH_MPI)
  // MPI initialized by a launcher whose variables we do not know (e.g. a singleton MPI_Init).
  if (!lookup && internal::mpi_initialized()) return from_mpi();
#endif
  return ClusterResolver();
}

}  // namespace chorus::distribute
