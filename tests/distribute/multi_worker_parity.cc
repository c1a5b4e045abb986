// One job run two ways must reach bit-identical weights: under `mpirun -np 2` (MPI between the
// workers) and without mpirun (two forked workers given only torchrun's variables: the store
// rendezvous and Gloo). run_multi_worker_parity.cmake (CTest) runs it as
//   mpirun -np 2 multi_worker_parity mpi   DEVICES OUT_A   # MPI; rank 0 writes OUT_A
//   multi_worker_parity store DEVICES OUT_B                 # forks 2 workers; rank 0 writes OUT_B
//   multi_worker_parity compare OUT_A OUT_B                 # exit 0 only when bitwise equal
// with 1 and 2 logical CPU devices per worker. Both ways run the same code, MpiEnvironment
// included (without mpirun MPI is a singleton of one process, so the strategy meets the other
// worker through the store); each run checks that its strategy used the transport it is named
// for. Each worker builds the same small Keras-style model
// (Flatten, Dense(16, relu), Dense(10); Adam), sets its weights to fixed values, fits 2 epochs of
// synthetic digits and rank 0 writes the initial and the trained weights. With two workers every
// cross-process sum has two operands, whose float sum does not depend on the order: MPI and Gloo
// must agree to the bit. compare also checks the files' form and that training moved the weights,
// so two empty or untrained files cannot pass.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/mpi/mpi.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/config.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/optimizer/adam.h>

namespace cx = chorus;

namespace {

constexpr char kMagic[] = "chorus multi-worker parity v1\n";

void configure_cpus(int n) {
  cx::config::set_logical_device_configuration(
      cx::config::list_physical_devices("CPU")[0],
      std::vector<cx::LogicalDeviceConfiguration>(static_cast<std::size_t>(n), {.memory_limit_mb = 256}));
}

std::vector<float> flat_weights(const cx::model::Model& m) {
  std::vector<float> out;
  for (const cx::Variable& v : m.trainable_variables()) {
    const std::vector<float> w = v.value().to_vector<float>();
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

// Trains the job's model on this worker; rank 0 writes kMagic, the count n, n initial and n
// trained weights to `out`. `transport`: what cross_device_ops().reason must name.
void train(int devices, const std::string& out, const std::string& transport) {
  cx::distribute::MultiWorkerMirroredStrategy s(
      {.device_policy = cx::distribute::WorkerDevicePolicy::kCpu, .cpu_devices_per_worker = devices});
  std::unique_ptr<cx::model::Sequential> m;
  {
    auto scope = s.scope();
    namespace L = cx::layers;
    m = std::make_unique<cx::model::Sequential>(
        std::vector<L::LayerPtr>{L::Flatten(), L::Dense(16, "relu"), L::Dense(10)});
    m->compile(std::make_shared<cx::optimizers::Adam>(1e-2),
               std::make_shared<cx::losses::SparseCategoricalCrossentropy>(true));
    m->build(cx::Shape({1, 28, 28, 1}));
  }
  std::int64_t i = 0;
  for (cx::Variable& v : m->trainable_variables()) {  // fixed weights: both runs start alike
    std::vector<float> w(static_cast<std::size_t>(v.shape().num_elements()));
    for (float& x : w) x = 0.05f * static_cast<float>(std::sin(0.37 * static_cast<double>(i++)));
    v.assign(cx::Tensor::from_vector<float>(w, v.shape(), "/cpu:0"));
  }
  const std::vector<float> initial = flat_weights(*m);
  const int R = s.num_replicas_in_sync();
  m->fit(cx::data::synthetic_digits(8 * R * 4, /*seed=*/11).batch(8 * R), {.epochs = 2, .verbose = 0});
  const std::vector<float> trained = flat_weights(*m);
  const std::string& reason = s.cross_device_ops().reason;
  std::printf("worker %d: %s\n", s.worker_index(), reason.c_str());
  if (s.num_workers() != 2 || reason.find(transport) == std::string::npos)
    throw std::runtime_error("expected 2 workers and " + transport + ", got " + s.cluster_resolver().to_string() +
                             ": " + reason);
  if (!s.is_chief()) return;
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  const std::uint64_t n = initial.size();
  f.write(kMagic, sizeof(kMagic) - 1);
  f.write(reinterpret_cast<const char*>(&n), sizeof(n));
  f.write(reinterpret_cast<const char*>(initial.data()), static_cast<std::streamsize>(n * sizeof(float)));
  f.write(reinterpret_cast<const char*>(trained.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!f) throw std::runtime_error("cannot write " + out);
}

// The job's program (both ways): MPI outlives the strategy.
int run_job(int devices, const std::string& out, const std::string& transport) {
  cx::collective::MpiEnvironment mpi;
  configure_cpus(devices);
  train(devices, out, transport);
  return 0;
}

// Two forked workers with only torchrun's variables, each running the job; 0 when both exited 0.
int run_store(int devices, const std::string& out) {
  const int port = cx::collective::TcpStoreServer(0, "127.0.0.1").port();
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string path = ::getenv("PATH") != nullptr ? ::getenv("PATH") : "/usr/bin:/bin";
      ::clearenv();  // torchrun's variables, and PATH (MPI_Init of a singleton starts Open MPI's orted)
      ::setenv("PATH", path.c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      int code = 0;
      try {
        code = run_job(devices, out, "Gloo between processes (store at 127.0.0.1:" + std::to_string(port) + ")");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

// The file's initial and trained weights; empty when it is not one of train()'s files.
bool read_weights(const std::string& path, std::vector<float>& initial, std::vector<float>& trained) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::size_t head = sizeof(kMagic) - 1 + sizeof(std::uint64_t);
  if (bytes.size() < head || bytes.compare(0, sizeof(kMagic) - 1, kMagic) != 0) return false;
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + sizeof(kMagic) - 1, sizeof(n));
  if (n == 0 || n > (bytes.size() - head) / (2 * sizeof(float)) || bytes.size() != head + 2 * n * sizeof(float))
    return false;
  initial.resize(n);
  trained.resize(n);
  std::memcpy(initial.data(), bytes.data() + head, n * sizeof(float));
  std::memcpy(trained.data(), bytes.data() + head + n * sizeof(float), n * sizeof(float));
  return true;
}

int compare(const std::string& a, const std::string& b) {
  std::vector<float> ia, ta, ib, tb;
  if (!read_weights(a, ia, ta) || !read_weights(b, ib, tb)) {
    std::fprintf(stderr, "compare: %s or %s is missing or not a parity file\n", a.c_str(), b.c_str());
    return 1;
  }
  if (ia.size() != ib.size() || std::memcmp(ia.data(), ib.data(), ia.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "compare: the runs did not start from the same weights\n");
    return 1;
  }
  double moved = 0, worst = 0;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < ta.size(); ++i) {
    moved = std::max(moved, std::abs(double(ta[i]) - ia[i]));
    worst = std::max(worst, std::abs(double(ta[i]) - tb[i]));
    differ += std::memcmp(&ta[i], &tb[i], sizeof(float)) != 0 ? 1 : 0;
  }
  std::printf("compare: %zu weights, training moved them by up to %.3g; %zu differ between the runs (largest %.3g)\n",
              ta.size(), moved, differ, worst);
  return moved > 1e-4 && differ == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc != 4 || (mode != "mpi" && mode != "store" && mode != "compare")) {
    std::fprintf(stderr, "usage: %s mpi|store DEVICES OUT  |  %s compare A B\n", argv[0], argv[0]);
    return 2;
  }
  try {
    if (mode == "compare") return compare(argv[2], argv[3]);
    const int devices = std::atoi(argv[2]);
    return mode == "mpi" ? run_job(devices, argv[3], "MPI between processes") : run_store(devices, argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
