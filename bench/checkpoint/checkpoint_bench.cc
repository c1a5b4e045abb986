// Checkpoint save/restore throughput: BundleWriter/BundleReader against the raw disk, in the same
// run, on the same bytes.
//
//   bench_checkpoint [--dir=/tmp] [--reps=5] [--sizes=64,256] [--with-1g] [--warm] [--quick]
//
// Cases: float32 variables of 4 MiB each, 64 MiB / 256 MiB (and 1 GiB with --with-1g) in total.
//   save:    BundleWriter: construct, add() every tensor, finish() (fsyncs data, index, directory)
//   restore: BundleReader: open (index parse + checks), read() every tensor (CRC-checked)
// Yardstick ("raw"): one plain file in the same directory: create, write() the same tensors'
// bytes one after another, fsync, close; read back with read() into buffers allocated and touched
// beforehand (so the yardstick is pure I/O; chorus's restore allocates its tensors in the timing).
// Nothing a user waits for is left out of either timing (fsyncs count, allocation counts).
// Before each restore the files' pages are dropped from the page cache (posix_fadvise
// DONTNEED after fsync; --warm keeps them), so both sides read from the disk.
// Each number is the median of --reps repetitions. Throughput in GB/s (1e9 bytes/s) of tensor
// bytes; ratio = chorus / raw (> 1: chorus is faster).
//
// A third row runs the user-level train::Checkpoint (write/read of Variables: object graph,
// snapshot copies, assignment back into the variables) against the same yardstick.
// Async save (issue 7's second goal): the time Checkpoint::write(path, {.async = true}) blocks
// the caller — its return plus the wait of the next op on the variables' device for the queued
// snapshot copies — against a synchronous Checkpoint::write of the same variables in
// the same run; goal: blocked <= 10% of the synchronous save. sync() is called after each async
// save, outside the blocked time, and its files are checked.
// Adding a method: append a Method to methods() below; it becomes one more row per size in the
// table and more cases in the JSON line.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "checkpoint/bundle.h"
#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"

namespace chorus {
namespace {

using bench::machine;
using bench::median;

constexpr std::int64_t kTensorFloats = (4 << 20) / 4;  // 4 MiB per variable

struct Options {
  std::string dir = "/tmp";
  int reps = 5;
  std::vector<int> sizes_mib = {64, 256};
  bool warm = false;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void check_io(bool ok, const char* what, const std::string& path) {
  if (!ok) throw UnknownError(std::string(what) + " '" + path + "': " + std::strerror(errno));
}

// One way of saving and restoring the variables; each returns seconds.
struct Method {
  std::string name;       // row label
  std::string yardstick;  // "" for the yardstick itself
  std::function<double(const std::vector<Tensor>&, const std::string& path)> save;
  std::function<double(const std::vector<Tensor>&, const std::string& path)> restore;  // checks contents
  std::function<void(const std::string& path)> drop;  // evict its files from the page cache
  std::function<void(const std::string& path)> remove;
};

// Variables holding copies of the benchmark's tensors, and a Checkpoint of them (rebuilt per size).
struct CheckpointOf {
  const void* source = nullptr;
  std::vector<Variable> variables;
  std::unique_ptr<train::Checkpoint> ckpt;
};

CheckpointOf& checkpoint_of(const std::vector<Tensor>& vars) {
  static CheckpointOf c;
  if (c.source != vars.data() || c.variables.size() != vars.size()) {
    c.ckpt.reset();
    c.variables.clear();
    std::vector<train::TrackableChild> children;
    for (std::size_t i = 0; i < vars.size(); ++i) {
      c.variables.push_back(make_variable({.initial_value = vars[i], .name = "v" + std::to_string(i)}));
      children.push_back({"v" + std::to_string(i), c.variables.back()});
    }
    c.ckpt = std::make_unique<train::Checkpoint>(std::move(children));
    c.source = vars.data();
  }
  return c;
}

std::string key_of(std::size_t i) {
  return "model/layer_with_weights-" + std::to_string(i) + "/kernel/.ATTRIBUTES/VARIABLE_VALUE";
}

std::vector<Method> methods() {
  std::vector<Method> m;
  m.push_back(Method{"raw write+fsync / read", "",
                     [](const std::vector<Tensor>& vars, const std::string& path) {
                       const double t0 = now();
                       const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                       check_io(fd >= 0, "open", path);
                       for (const Tensor& t : vars) {
                         const char* p = static_cast<const char*>(t.data());
                         std::size_t left = t.nbytes();
                         while (left > 0) {
                           const ssize_t n = ::write(fd, p, left);
                           check_io(n > 0, "write", path);
                           p += n;
                           left -= static_cast<std::size_t>(n);
                         }
                       }
                       check_io(::fsync(fd) == 0, "fsync", path);
                       check_io(::close(fd) == 0, "close", path);
                       return now() - t0;
                     },
                     [bufs = std::make_shared<std::vector<std::vector<char>>>()](const std::vector<Tensor>& vars,
                                                                                 const std::string& path) {
                       // Destination buffers allocated and touched outside the timing: the yardstick is the
                       // disk and the kernel's copy alone (chorus's side allocates its tensors inside).
                       bufs->resize(vars.size());
                       for (std::size_t i = 0; i < vars.size(); ++i) (*bufs)[i].assign(vars[i].nbytes(), 1);
                       const double t0 = now();
                       const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
                       check_io(fd >= 0, "open", path);
                       for (std::size_t i = 0; i < vars.size(); ++i) {
                         const Tensor& t = vars[i];
                         std::size_t got = 0;
                         while (got < t.nbytes()) {
                           const ssize_t n = ::read(fd, (*bufs)[i].data() + got, t.nbytes() - got);
                           check_io(n > 0, "read", path);
                           got += static_cast<std::size_t>(n);
                         }
                       }
                       ::close(fd);
                       const double dt = now() - t0;
                       if (std::memcmp(bufs->back().data(), vars.back().data(), vars.back().nbytes()) != 0)
                         throw InternalError("raw restore read different bytes");
                       return dt;
                     },
                     [](const std::string& path) { drop_cache(path); },
                     [](const std::string& path) { std::filesystem::remove(path); }});
  m.push_back(Method{"chorus BundleWriter / BundleReader", "raw write+fsync / read",
                     [](const std::vector<Tensor>& vars, const std::string& prefix) {
                       const double t0 = now();
                       train::BundleWriter w(prefix);
                       for (std::size_t i = 0; i < vars.size(); ++i) w.add(key_of(i), vars[i]);
                       w.finish();
                       return now() - t0;
                     },
                     [](const std::vector<Tensor>& vars, const std::string& prefix) {
                       const double t0 = now();
                       train::BundleReader r(prefix);
                       std::vector<Tensor> out;
                       for (std::size_t i = 0; i < vars.size(); ++i) out.push_back(r.read(key_of(i)));
                       const double dt = now() - t0;
                       if (std::memcmp(out.back().data(), vars.back().data(), vars.back().nbytes()) != 0)
                         throw InternalError("bundle restore read different bytes");
                       return dt;
                     },
                     [](const std::string& prefix) {
                       drop_cache(train::index_filename(prefix));
                       drop_cache(train::data_filename(prefix));
                     },
                     [](const std::string& prefix) { train::delete_bundle(prefix); }});
  m.push_back(Method{"chorus Checkpoint write / read", "raw write+fsync / read",
                     [](const std::vector<Tensor>& vars, const std::string& prefix) {
                       CheckpointOf& c = checkpoint_of(vars);
                       const double t0 = now();
                       c.ckpt->write(prefix);
                       return now() - t0;
                     },
                     [](const std::vector<Tensor>& vars, const std::string& prefix) {
                       CheckpointOf& c = checkpoint_of(vars);
                       for (const Variable& v : c.variables)
                         v.impl()->assign(Tensor::zeros(v.shape(), v.dtype(), "/CPU:0"));
                       const double t0 = now();
                       c.ckpt->read(prefix).assert_consumed();
                       const double dt = now() - t0;
                       if (c.variables.back().read_value().to_vector<float>() != vars.back().to_vector<float>())
                         throw InternalError("Checkpoint restore read different values");
                       return dt;
                     },
                     [](const std::string& prefix) {
                       drop_cache(train::index_filename(prefix));
                       drop_cache(train::data_filename(prefix));
                     },
                     [](const std::string& prefix) { train::delete_bundle(prefix); }});
  return m;
}

// Async save: seconds the caller is blocked, and seconds of a synchronous write, alternating.
std::pair<double, double> async_blocked_vs_sync(const std::vector<Tensor>& vars, const std::string& prefix, int reps) {
  CheckpointOf& c = checkpoint_of(vars);
  std::vector<double> blocked, sync;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    c.ckpt->write(prefix, {.async = true});
    // The snapshot copies are queued on the variables' device stream: the training thread's next
    // op on that device waits for them. Count that wait (one tiny op) as blocked time too.
    Tensor probe = Tensor::scalar<float>(1, "/CPU:0");
    (void)ops::add(probe, probe).item<float>();
    blocked.push_back(now() - t0);
    c.ckpt->sync();
    if (!train::bundle_exists(prefix)) throw InternalError("async save left no bundle");
    train::delete_bundle(prefix);
    t0 = now();
    c.ckpt->write(prefix);
    sync.push_back(now() - t0);
    train::delete_bundle(prefix);
  }
  return {median(blocked), median(sync)};
}

struct Row {
  std::string method, yardstick;
  int size_mib;
  double save_gbps, restore_gbps;
};

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--dir=", 0) == 0) {
      o.dir = a.substr(6);
    } else if (a.rfind("--reps=", 0) == 0) {
      o.reps = std::max(1, std::stoi(a.substr(7)));
    } else if (a.rfind("--sizes=", 0) == 0) {
      o.sizes_mib.clear();
      std::string s = a.substr(8);
      for (std::size_t p = 0; p <= s.size();) {
        const std::size_t q = std::min(s.find(',', p), s.size());
        o.sizes_mib.push_back(std::stoi(s.substr(p, q - p)));
        p = q + 1;
      }
    } else if (a == "--with-1g") {
      o.sizes_mib.push_back(1024);
    } else if (a == "--warm") {
      o.warm = true;
    } else if (a == "--quick") {
      o.sizes_mib = {8};
      o.reps = 1;
    } else {
      std::fprintf(stderr, "usage: %s [--dir=/tmp] [--reps=5] [--sizes=64,256] [--with-1g] [--warm] [--quick]\n",
                   argv[0]);
      return 2;
    }
  }
  const std::string dir = o.dir + "/chorus_checkpoint_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::printf("checkpoint save/restore, float32 variables of 4 MiB, dir %s, median of %d, %s page cache\n",
              o.dir.c_str(), o.reps, o.warm ? "warm" : "cold (dropped before restore)");
  const std::vector<Method> ms = methods();
  std::vector<Row> rows;
  struct Async {
    int size_mib;
    double blocked_s, sync_s;
  };
  std::vector<Async> asyncs;
  for (int mib : o.sizes_mib) {
    std::vector<Tensor> vars;
    const std::int64_t floats = std::int64_t{mib} << 18;  // mib × 2^20 / 4
    for (std::int64_t done = 0; done < floats; done += kTensorFloats) {
      const std::int64_t n = std::min(kTensorFloats, floats - done);
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j)
        v[static_cast<std::size_t>(j)] = static_cast<float>((done + j) % 1000) * 0.5f;
      vars.push_back(Tensor::from_vector<float>(v, "/CPU:0"));
    }
    const double bytes = static_cast<double>(floats) * 4;
    // Repetitions outer, methods inner: a drift in the machine's disk speed hits every method alike.
    std::vector<std::vector<double>> save(ms.size()), restore(ms.size());
    const std::string path = dir + "/ckpt";
    for (int r = 0; r < o.reps; ++r) {
      for (std::size_t i = 0; i < ms.size(); ++i) {
        save[i].push_back(ms[i].save(vars, path));
        if (!o.warm) ms[i].drop(path);
        restore[i].push_back(ms[i].restore(vars, path));
        ms[i].remove(path);
      }
    }
    for (std::size_t i = 0; i < ms.size(); ++i)
      rows.push_back(
          {ms[i].name, ms[i].yardstick, mib, bytes / median(save[i]) / 1e9, bytes / median(restore[i]) / 1e9});
    const auto [blocked, sync] = async_blocked_vs_sync(vars, path, o.reps);
    asyncs.push_back({mib, blocked, sync});
  }
  std::filesystem::remove_all(dir);

  std::printf("%-38s %8s %12s %12s %10s %10s\n", "method", "size", "save GB/s", "restore GB/s", "save/raw",
              "restore/raw");
  auto yard = [&](const Row& r) -> const Row* {
    for (const Row& y : rows)
      if (y.method == r.yardstick && y.size_mib == r.size_mib) return &y;
    return nullptr;
  };
  for (const Row& r : rows) {
    const Row* y = yard(r);
    std::printf("%-38s %5d MiB %12.3f %12.3f", r.method.c_str(), r.size_mib, r.save_gbps, r.restore_gbps);
    if (y) std::printf(" %9.0f%% %9.0f%%", 100 * r.save_gbps / y->save_gbps, 100 * r.restore_gbps / y->restore_gbps);
    std::printf("\n");
  }
  std::printf("\n%-38s %8s %12s %12s %10s\n", "async Checkpoint::write", "size", "blocked ms", "sync ms",
              "blocked/sync");
  for (const Async& a : asyncs) {
    std::printf("%-38s %5d MiB %12.2f %12.2f %9.1f%%  (goal <= 10%%)\n", "caller blocked vs synchronous write",
                a.size_mib, a.blocked_s * 1e3, a.sync_s * 1e3, 100 * a.blocked_s / a.sync_s);
  }
  std::vector<std::string> cases;
  for (const Async& a : asyncs)
    cases.push_back(bench::json_case("async save blocked " + std::to_string(a.size_mib) + " MiB", a.blocked_s * 1e3,
                                     "ms", "synchronous Checkpoint::write", a.sync_s * 1e3, a.blocked_s / a.sync_s,
                                     "%.3f", "%.4f"));
  for (const Row& r : rows) {
    const Row* y = yard(r);
    if (!y) continue;
    for (int which = 0; which < 2; ++which) {
      const double v = which == 0 ? r.save_gbps : r.restore_gbps;
      const double yv = which == 0 ? y->save_gbps : y->restore_gbps;
      const std::string name = r.method + (which == 0 ? " save " : " restore ") + std::to_string(r.size_mib) + " MiB";
      cases.push_back(bench::json_case(name, v, "GB/s", y->method, yv, v / yv, "%.4f"));
    }
  }
  bench::print_json_line("checkpoint", machine(), cases);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  return chorus::bench::run_main("bench_checkpoint", [&] { return chorus::run(argc, argv); });
}
