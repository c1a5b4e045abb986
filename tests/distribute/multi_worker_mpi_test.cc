// MultiWorkerMirroredStrategy across processes, run by CTest as `mpirun -n 2` and `-n 3` (label
// mpi). Every process runs every test in the same order and builds its strategies first, so a rank
// that fails an assertion still meets the others at the next collective. Expected values are
// analytic (sums of replica ids) or come from a reference: one process with MirroredStrategy on
// workers × k logical CPU devices, computed by rank 0 in-process after the multi-worker run.
// main() configures 6 logical CPU devices per process (enough for 3 workers × 2 devices).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/collective/mpi_test_main.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/collective/mpi/mpi.h>
#include <chorus/core/config.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/timeline.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/cluster_resolver.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/adam.h>

namespace chorus::distribute {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{60000};  // generous: rank 0 computes references while the others wait
constexpr int kCpuDevices = 6;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

MultiWorkerMirroredStrategyOptions options(int k) { return {.cpu_devices_per_worker = k, .timeout = kTimeout}; }

// Rows 0..n-1 (one float column) batched into global batches.
data::Dataset rows(std::int64_t n, std::int64_t batch) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return data::Dataset::from_tensor_slices({Tensor::from_vector<float>(v, {n, 1}, "/cpu:0")}).batch(batch);
}

class MultiWorker : public ::testing::TestWithParam<int> {};  // parameter: local devices per worker

TEST_P(MultiWorker, IdentityAndInputContext) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  collective::MpiEnvironment env;  // already initialized by main(): only reads rank and size
  EXPECT_EQ(s.num_workers(), env.world_size());
  EXPECT_EQ(s.worker_index(), env.world_rank());
  EXPECT_EQ(s.is_chief(), env.world_rank() == 0);
  EXPECT_EQ(s.num_replicas_in_sync(), env.world_size() * k);
  EXPECT_EQ(s.num_local_replicas(), k);
  EXPECT_EQ(s.cluster_resolver().source(), "Open MPI environment");
  EXPECT_TRUE(contains(s.cross_device_ops().reason, k == 1 ? "MPI between processes" : "hierarchical"))
      << s.cross_device_ops().reason;
  InputContext seen;
  s.distribute_datasets_from_function([&](const InputContext& c) {
    seen = c;
    return rows(4, 1);
  });
  EXPECT_EQ(seen.num_input_pipelines, env.world_size());
  EXPECT_EQ(seen.input_pipeline_id, env.world_rank());
  EXPECT_EQ(seen.num_replicas_in_sync, env.world_size() * k);
  // Replica ids in sync group, and an all-reduce over all of them: 0 + 1 + ... + R-1.
  const int R = s.num_replicas_in_sync();
  auto out = s.run([&] {
    auto* ctx = get_replica_context();
    Tensor id = Tensor::full({2}, ctx->replica_id_in_sync_group());
    Tensor sum = ctx->all_reduce(ReduceOp::kSum, id);
    return ops::concat({id, sum}, 0);
  });
  for (int r = 0; r < k; ++r) {
    const auto v = out[r].to_vector<float>();
    EXPECT_EQ(v[0], s.worker_index() * k + r);
    EXPECT_EQ(v[2], R * (R - 1) / 2.0f);
  }
}

TEST_P(MultiWorker, ReduceAndGatherSpanAllWorkers) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  const int R = s.num_replicas_in_sync();
  // Replica g returns g + 1 rows of value g (uneven lengths across workers).
  auto out = s.run([&] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    return Tensor::full({g + 1, 2}, g);
  });
  Tensor all = s.gather(out, 0);
  ASSERT_EQ(all.shape().dims(), (std::vector<std::int64_t>{R * (R + 1) / 2, 2}));
  std::vector<float> expect;
  for (int g = 0; g < R; ++g)
    for (int i = 0; i < 2 * (g + 1); ++i) expect.push_back(static_cast<float>(g));
  EXPECT_EQ(all.to_vector<float>(), expect);
  // Along axis 1 too (rows must match: use per-replica [1, g+1] rows).
  auto wide = s.run([&] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    return Tensor::full({1, g + 1}, g);
  });
  EXPECT_EQ(s.gather(wide, 1).shape().dims(), (std::vector<std::int64_t>{1, R * (R + 1) / 2}));
  // SUM over replicas of [g+1 rows of g] summed along axis 0: sum g (g+1); MEAN per example.
  double sum = 0, count = 0;
  for (int g = 0; g < R; ++g) {
    sum += g * (g + 1.0);
    count += g + 1;
  }
  EXPECT_EQ(s.reduce(ReduceOp::kSum, out, 0).to_vector<float>(), (std::vector<float>(2, static_cast<float>(sum))));
  auto mean = s.reduce(ReduceOp::kMean, out, 0).to_vector<float>();
  EXPECT_NEAR(mean[0], sum / count, 1e-5);
  // Without axis: elementwise over the R replicas of one value each.
  auto ones = s.run([&] { return Tensor::full({3}, get_replica_context()->replica_id_in_sync_group()); });
  EXPECT_EQ(s.reduce(ReduceOp::kSum, ones).to_vector<float>(), std::vector<float>(3, R * (R - 1) / 2.0f));
  EXPECT_NEAR(s.reduce(ReduceOp::kMean, ones).to_vector<float>()[0], (R - 1) / 2.0, 1e-6);
  EXPECT_EQ(s.reduce(ReduceOp::kSum, Tensor::ones({2})).to_vector<float>(),
            std::vector<float>(2, static_cast<float>(R)));
}

TEST_P(MultiWorker, DatasetShardsEveryGlobalBatchOverAllReplicas) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  // 23 rows in global batches of 10: uneven over 2×k or 3×k replicas, and a last batch of 3.
  auto it = s.experimental_distribute_dataset(rows(23, 10)).make_iterator();
  int steps = 0;
  std::vector<float> seen;
  while (auto batch = it.next()) {
    auto mine = s.run([](const data::Element& e) { return e[0]; }, *batch);
    auto v = s.gather(mine, 0).to_vector<float>();  // every replica's rows, in replica order
    seen.insert(seen.end(), v.begin(), v.end());
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  std::vector<float> all;
  for (int i = 0; i < 23; ++i) all.push_back(static_cast<float>(i));
  EXPECT_EQ(seen, all) << "every row once, in order, across all workers' replicas";
}

TEST_P(MultiWorker, VariablesStartFromTheChiefsValue) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  collective::MpiEnvironment env;
  const double mine = env.world_rank() + 1.0;  // each worker's "initializer" differs
  Variable w;
  {
    auto scope = s.scope();
    w = make_variable({.initial_value = Tensor::full({4}, mine), .name = "w"});
  }
  EXPECT_EQ(w.value().to_vector<float>(), std::vector<float>(4, 1.0f));  // the chief's
  // Created inside run (merge_call), int64 as well: raw bytes travel.
  auto got = s.run([&] {
    Variable v = make_variable({.initial_value = Tensor::full({3}, mine * 7, DType::kInt64), .name = "v"});
    return v.value();
  });
  for (int r = 0; r < k; ++r) EXPECT_EQ(got[r].to_vector<std::int64_t>(), std::vector<std::int64_t>(3, 7));
}

TEST_P(MultiWorker, ATamperedVariableIsNamedAtTheNextRun) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  collective::MpiEnvironment env;
  Variable a, w;
  {
    auto scope = s.scope();
    a = make_variable({.initial_value = Tensor::ones({2}), .name = "a"});
    w = make_variable({.initial_value = Tensor::zeros({3}), .name = "w"});
  }
  if (env.world_rank() == 1) w.assign(Tensor::full({3}, 5.0));  // after the broadcast, on one worker
  std::string m;
  try {
    s.run([] {});
  } catch (const FailedPreconditionError& e) {
    m = e.what();
  }
  EXPECT_TRUE(contains(m, "variable 'w' differs across workers")) << m;
  EXPECT_TRUE(contains(m, "on rank 0 (chief) but rank 1 has")) << m;
  EXPECT_FALSE(contains(m, "rank 2 has")) << m;
  // Once all agree again, runs go on (the check covers variables not checked yet).
  w.assign(Tensor::zeros({3}));
  EXPECT_NO_THROW(s.run([] {}));
}

// The seed CNN (examples/mnist_mirrored.cc) and Adam, built in the strategy's scope.
struct Cnn {
  std::unique_ptr<model::Sequential> model;
  std::shared_ptr<optimizers::Adam> adam;
};
Cnn cnn(Strategy& s) {
  auto scope = s.scope();
  namespace L = layers;
  Cnn c;
  c.model = std::make_unique<model::Sequential>(std::vector<L::LayerPtr>{
      L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
      L::Conv2D(64, 3, "relu"), L::Flatten(), L::Dense(64, "relu"), L::Dense(10)});
  c.model->build(Shape({1, 28, 28, 1}));
  c.adam = std::make_shared<optimizers::Adam>(1e-3);
  c.adam->build(c.model->trainable_variables());
  return c;
}

// TF's custom training loop: each replica's loss is sum(per-example) / global batch size, the
// optimizer sums the gradients over all replicas of all workers. (Model::fit has its own test
// below.)
void train(Strategy& s, Cnn& c, const data::Dataset& ds, std::int64_t global_batch) {
  const losses::SparseCategoricalCrossentropy loss(/*from_logits=*/true);
  const std::vector<Variable> vars = c.model->trainable_variables();
  auto it = s.experimental_distribute_dataset(ds).make_iterator();
  while (auto batch = it.next()) {
    s.run(
        [&](const data::Element& e) {
          ops::GradientTape tape;
          Tensor per_example = loss.per_example(e[1], (*c.model)(e[0], true));
          Tensor l = losses::compute_average_loss(per_example, global_batch);
          std::vector<Tensor> grads = tape.gradient(l, vars, Tensor(), ops::UnconnectedGradients::kZero);
          optimizers::GradsAndVars gv;
          for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
          c.adam->apply_gradients(gv);
        },
        *batch);
  }
}

std::vector<std::vector<float>> weights(const model::Model& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : m.trainable_variables()) out.push_back(v.value().to_vector<float>());
  return out;
}

TEST_P(MultiWorker, TrainsTheSeedCnnToTheWeightsOfOneProcess) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  const int R = s.num_replicas_in_sync();
  const std::int64_t global = 4 * R, steps = 3;
  auto ds = data::synthetic_digits(global * steps, /*seed=*/5).batch(global);
  auto c = cnn(s);
  const auto initial = weights(*c.model);
  train(s, c, ds, global);
  const auto trained = weights(*c.model);
  // Every worker holds the same weights (bitwise: same reduced gradients, same update).
  std::uint32_t crc = 0;
  for (const auto& w : trained) crc = crc32c(w.data(), w.size() * sizeof(float), crc);
  auto* comm = s.worker_communicator();
  Tensor all = Tensor::empty({comm->size()}, DType::kInt64, "/cpu:0");
  comm->all_gather(Tensor::from_vector<std::int64_t>({crc}, {1}, "/cpu:0"), all, {.timeout = kTimeout})->wait(kTimeout);
  for (std::int64_t c : all.to_vector<std::int64_t>()) EXPECT_EQ(c, crc) << "workers' weights differ";
  // Training moved the weights.
  double moved = 0;
  for (std::size_t i = 0; i < trained.size(); ++i)
    for (std::size_t j = 0; j < trained[i].size(); ++j)
      moved = std::max(moved, std::abs(double(trained[i][j]) - initial[i][j]));
  EXPECT_GT(moved, 1e-4);
  if (!s.is_chief()) return;
  // Reference: one process, MirroredStrategy on R logical CPU devices, same initial weights, same data.
  std::vector<std::string> devices;
  for (int r = 0; r < R; ++r) devices.push_back("/cpu:" + std::to_string(r));
  MirroredStrategy ref(devices);
  auto c2 = cnn(ref);
  auto vars = c2.model->trainable_variables();
  ASSERT_EQ(vars.size(), initial.size());
  for (std::size_t i = 0; i < vars.size(); ++i)
    vars[i].assign(Tensor::from_vector<float>(initial[i], vars[i].shape(), "/cpu:0"));
  train(ref, c2, ds, global);
  const auto expect = weights(*c2.model);
  double diff = 0, norm = 0, worst = 0;
  for (std::size_t i = 0; i < expect.size(); ++i)
    for (std::size_t j = 0; j < expect[i].size(); ++j) {
      const double d = double(trained[i][j]) - expect[i][j];
      diff += d * d;
      norm += double(expect[i][j]) * expect[i][j];
      worst = std::max(worst, std::abs(d));
    }
  const double rel = std::sqrt(diff / norm);
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", rel);
  RecordProperty("relative_difference", text);
  EXPECT_LT(rel, 1e-5) << "multi-worker weights vs one process with " << R << " replicas (largest |diff| " << worst
                       << ")";
}

// A small compiled model (Model::fit and checkpoints), built in the strategy's scope.
std::unique_ptr<model::Sequential> mlp(Strategy& s) {
  auto scope = s.scope();
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Flatten(), layers::Dense(16, "relu"), layers::Dense(10)});
  m->compile(std::make_shared<optimizers::Adam>(1e-2), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  return m;
}

void set_weights(model::Model& m, const std::vector<std::vector<float>>& w) {
  auto vars = m.trainable_variables();
  ASSERT_EQ(vars.size(), w.size());
  for (std::size_t i = 0; i < vars.size(); ++i)
    vars[i].assign(Tensor::from_vector<float>(w[i], vars[i].shape(), "/cpu:0"));
}

double relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      diff += (double(a[i][j]) - b[i][j]) * (double(a[i][j]) - b[i][j]);
      norm += double(b[i][j]) * b[i][j];
    }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Model::fit divides every replica's loss by the rows of the whole global batch — all workers'
// (Strategy::sum_over_workers) — so workers × k replicas train like one process with as many.
TEST_P(MultiWorker, FitTrainsLikeOneProcess) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  const int R = s.num_replicas_in_sync();
  // 5 global batches of 4·R rows and a last, uneven one of 3 rows.
  auto ds = data::synthetic_digits(4 * R * 5 + 3, /*seed=*/7).batch(4 * R);
  auto m = mlp(s);
  m->build(Shape({1, 28, 28, 1}));
  const auto initial = weights(*m);
  const model::History h = m->fit(ds, {.epochs = 2, .verbose = 0});
  const auto trained = weights(*m);
  // The epoch's loss covers every worker's rows: the same on every worker.
  const double loss = h.history.at("loss").back();
  const std::vector<double> sums = s.sum_over_workers(std::vector<double>{loss, loss * loss});
  const double mean = sums[0] / s.num_workers();
  EXPECT_NEAR(sums[1] / s.num_workers() - mean * mean, 0.0, 1e-12) << "the workers report different losses";
  EXPECT_DOUBLE_EQ(loss, mean);
  if (!s.is_chief()) return;
  std::vector<std::string> devices;
  for (int r = 0; r < R; ++r) devices.push_back("/cpu:" + std::to_string(r));
  MirroredStrategy ref(devices);
  auto m2 = mlp(ref);
  m2->build(Shape({1, 28, 28, 1}));
  set_weights(*m2, initial);
  const model::History h2 = m2->fit(ds, {.epochs = 2, .verbose = 0});
  EXPECT_LT(relative_difference(trained, weights(*m2)), 1e-5) << "fit with " << s.num_workers() << " workers x " << k;
  EXPECT_NEAR(loss, h2.history.at("loss").back(), 1e-5 * std::max(1.0, std::abs(loss))) << "the job's loss";
}

// The timeline under mpirun (core/timeline.h): "%r" gives each rank its own file, whose events
// carry the rank as their process id, with a track per local replica numbered by its global
// replica id (and one for its all-reduce thread), and the collectives of the fit among them.
TEST_P(MultiWorker, TimelineWritesOneFilePerRankWithTheRankAsProcess) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  auto* comm = s.worker_communicator();
  Tensor pid = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(::getpid())}, {1}, "/cpu:0");
  comm->broadcast(pid, {.root = 0, .timeout = kTimeout})->wait(kTimeout);
  const std::string dir = "/tmp/chorus_mw_timeline_" + std::to_string(pid.to_vector<std::int64_t>()[0]);
  std::filesystem::create_directories(dir);
  auto m = mlp(s);
  timeline::start(dir + "/t-%r.json");
  m->fit(data::synthetic_digits(8 * s.num_replicas_in_sync(), 3).batch(4 * s.num_replicas_in_sync()),
         {.epochs = 1, .verbose = 0});
  const std::string file = timeline::stop();
  const int rank = s.worker_index();
  EXPECT_EQ(file, dir + "/t-" + std::to_string(rank) + ".json");
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const chorus::internal::Json doc = chorus::internal::parse_json(text, file);
  int collectives = 0;
  std::set<int> replica_tracks, all_reduce_tracks;  // replica R: tid 1000 + R; its all-reduce thread: 2000 + R
  for (const auto& e : doc.at("traceEvents")) {
    EXPECT_EQ(e.at("pid").get<int>(), rank);
    if (e.at("ph").get_ref<const std::string&>() == "X" && e.at("cat").get_ref<const std::string&>() == "collective")
      ++collectives;
    if (e.at("name").get_ref<const std::string&>() != "thread_name") continue;
    const std::string& name = e.at("args").at("name").get_ref<const std::string&>();
    const int tid = e.at("tid").get<int>();
    if (tid >= 2000) {
      EXPECT_EQ(name, "replica " + std::to_string(tid - 2000) + " all-reduce");
      all_reduce_tracks.insert(tid - 2000);
    } else if (name.rfind("replica ", 0) == 0) {
      replica_tracks.insert(tid - 1000);
    }
  }
  EXPECT_GT(collectives, 0);
  std::set<int> mine;
  for (int r = 0; r < k; ++r) mine.insert(s.worker_offset() + r);
  EXPECT_EQ(replica_tracks, mine);
  // The communication threads' tracks when the strategy overlaps (docs/overlap.md: by default
  // when the op threads leave a core free, so it depends on the machine).
  EXPECT_EQ(all_reduce_tracks, s.overlaps_gradient_all_reduce() ? mine : std::set<int>{}) << s.overlap_reason();
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  if (s.is_chief()) std::filesystem::remove_all(dir);
}

// Only the chief writes; every worker returns from save() after the bundle is durable (the
// strategy's worker barrier); a checkpoint of W workers restores in one process, and one written
// by one process restores on every worker.
TEST_P(MultiWorker, CheckpointsSaveOnceAndRestoreAcrossWorkerCounts) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  auto* comm = s.worker_communicator();
  // One directory for the job: rank 0's pid.
  Tensor pid = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(::getpid())}, {1}, "/cpu:0");
  comm->broadcast(pid, {.root = 0, .timeout = kTimeout})->wait(kTimeout);
  const std::string dir =
      "/tmp/chorus_mw_ckpt_" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "_k" + std::to_string(k);

  auto m = mlp(s);
  m->fit(data::synthetic_digits(8 * s.num_replicas_in_sync(), 3).batch(4 * s.num_replicas_in_sync()),
         {.epochs = 1, .verbose = 0});
  const auto trained = weights(*m);
  std::string saved;
  {
    train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
    train::CheckpointManager manager(ckpt, dir, 2);  // the chief locks the directory; others write nothing
    saved = manager.save().value();
    EXPECT_TRUE(train::bundle_exists(saved)) << "worker " << s.worker_index() << " returned before the bundle existed";
  }
  EXPECT_EQ(saved, dir + "/ckpt-1");

  // W workers → one process (rank 0, default strategy), restored before the model is built.
  if (s.is_chief()) {
    auto plain = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Flatten(), layers::Dense(16, "relu"), layers::Dense(10)});
    train::Checkpoint one({{"model", *plain}});
    auto status = one.read(saved);
    plain->build(Shape({1, 28, 28, 1}));
    status.expect_partial().assert_existing_objects_matched();
    EXPECT_EQ(weights(*plain), trained);

    // One process → W workers: rank 0 writes other weights with the default strategy.
    auto other = weights(*plain);
    for (auto& w : other)
      for (float& x : w) x = x * 0.5f + 0.25f;
    set_weights(*plain, other);
    train::Checkpoint({{"model", *plain}}).write(dir + "/single", {.chief = true});
  }
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  auto m2 = mlp(s);
  train::Checkpoint back({{"model", *m2}});
  auto status = back.read(dir + "/single");
  m2->build(Shape({1, 28, 28, 1}));
  EXPECT_TRUE(status.unused_keys().empty());  // every value found its variable (the optimizer had none saved)
  status.expect_partial();
  auto expect = trained;
  for (auto& w : expect)
    for (float& x : w) x = x * 0.5f + 0.25f;
  EXPECT_EQ(weights(*m2), expect) << "worker " << s.worker_index();
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  if (s.is_chief()) std::filesystem::remove_all(dir);
}

// ON_READ variables (metric accumulators) are saved as the aggregate over every worker's replicas
// (TF all-reduces SyncOnRead values at save) and restored as value / all replicas (SUM).
TEST_P(MultiWorker, OnReadVariablesSaveTheAggregateOfAllWorkers) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy s(options(k));
  auto* comm = s.worker_communicator();
  Tensor pid = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(::getpid())}, {1}, "/cpu:0");
  comm->broadcast(pid, {.root = 0, .timeout = kTimeout})->wait(kTimeout);
  const std::string dir =
      "/tmp/chorus_mw_onread_" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "_k" + std::to_string(k);
  if (s.is_chief()) std::filesystem::create_directories(dir);
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  Variable total, mean;
  {
    auto scope = s.scope();
    total = make_variable({.initial_value = Tensor::scalar<float>(0, "/cpu:0"),
                           .name = "total",
                           .trainable = false,
                           .synchronization = VariableSynchronization::kOnRead,
                           .aggregation = VariableAggregation::kSum});
    mean = make_variable({.initial_value = Tensor::scalar<float>(0, "/cpu:0"),
                          .name = "mean",
                          .trainable = false,
                          .synchronization = VariableSynchronization::kOnRead,
                          .aggregation = VariableAggregation::kMean});
  }
  const int R = s.num_replicas_in_sync();
  auto t = std::dynamic_pointer_cast<distribute::MirroredVariable>(total.impl());
  auto m = std::dynamic_pointer_cast<distribute::MirroredVariable>(mean.impl());
  for (int r = 0; r < k; ++r) {  // global replica id + 1
    const float v = static_cast<float>(s.worker_index() * k + r + 1);
    t->components()[static_cast<std::size_t>(r)].impl()->assign(Tensor::scalar<float>(v, "/cpu:0"));
    m->components()[static_cast<std::size_t>(r)].impl()->assign(Tensor::scalar<float>(v, "/cpu:0"));
  }
  train::Checkpoint ckpt({{"total", total}, {"mean", mean}});
  const std::string path = ckpt.write(dir + "/onread");
  const float sum = R * (R + 1) / 2.0f;
  if (s.is_chief()) {
    train::BundleReader r(path);
    EXPECT_FLOAT_EQ(r.read("total/.ATTRIBUTES/VARIABLE_VALUE").item<float>(), sum);
    EXPECT_FLOAT_EQ(r.read("mean/.ATTRIBUTES/VARIABLE_VALUE").item<float>(), sum / static_cast<float>(R));
  }
  ckpt.read(path).assert_consumed();
  for (int r = 0; r < k; ++r) {
    EXPECT_FLOAT_EQ(t->components()[static_cast<std::size_t>(r)].value().item<float>(), sum / static_cast<float>(R));
    EXPECT_FLOAT_EQ(m->components()[static_cast<std::size_t>(r)].value().item<float>(), sum / static_cast<float>(R));
  }
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  if (s.is_chief()) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(LocalDevices, MultiWorker, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "k" + std::to_string(i.param); });

TEST(MultiWorkerErrors, ResolverThatDisagreesWithMpiIsRefusedEverywhere) {
  collective::MpiEnvironment env;
  // Every worker claims to be worker 0 of the right size: MPI ranks ≠ worker indices.
  auto wrong = ClusterResolver::from_mpi_launcher([&](const char* n) -> std::optional<std::string> {
    if (std::string(n) == "OMPI_COMM_WORLD_RANK") return "0";
    if (std::string(n) == "OMPI_COMM_WORLD_SIZE") return std::to_string(env.world_size());
    return std::nullopt;
  });
  std::string m;
  try {
    MultiWorkerMirroredStrategy s({.cluster_resolver = wrong, .timeout = kTimeout});
  } catch (const FailedPreconditionError& e) {
    m = e.what();
  }
  EXPECT_TRUE(contains(m, "MPI rank 1 is worker 0 according to its cluster resolver")) << m;
}

TEST(MultiWorkerErrors, DatasetsOfDifferentSizesAreRefusedOnEveryWorkerBeforeTheFirstStep) {
  collective::MpiEnvironment env;
  MultiWorkerMirroredStrategy s({.timeout = kTimeout});
  // Worker w reads 10 + w global batches: the steps could never match (before, fit waited for the
  // worker with fewer batches until the timeout).
  const std::int64_t batches = 10 + env.world_rank();
  const auto start = std::chrono::steady_clock::now();
  std::string m;
  try {
    s.experimental_distribute_dataset(rows(batches * 4, 4));
  } catch (const InvalidArgumentError& e) {
    m = e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "not a timed-out collective";
  EXPECT_TRUE(contains(m, "the datasets differ across workers")) << m;
  for (int w = 0; w < env.world_size(); ++w)
    EXPECT_TRUE(contains(m, "worker " + std::to_string(w) + ": " + std::to_string(10 + w) + " global batches")) << m;
  // Equal sizes pass; kOff (each worker reads its own data) is not compared.
  EXPECT_NO_THROW(s.experimental_distribute_dataset(rows(40, 4)));
  EXPECT_NO_THROW(s.experimental_distribute_dataset(rows(batches * 4, 4), AutoShardPolicy::kOff));
}

}  // namespace
}  // namespace chorus::distribute

int main(int argc, char** argv) {
  return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, chorus::distribute::kCpuDevices, 512);
}
