// Checkpoints of variables that live on GPUs: mirrored variables on two virtual GPUs carved out of
// GPU:0 are written once (what the file holds is checked against the host values they were made
// from), restored into every component on its own GPU after being changed, moved between GPU and
// CPU-only strategies in both directions, saved asynchronously while training goes on, and a
// model with its Adam state resumes exactly. Skips without a GPU (label gpu), with the CUDA
// runtime's reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/virtual_gpus.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>

namespace chorus::train {
namespace {

using distribute::MirroredStrategy;
using distribute::MirroredVariable;
using testing::TempDir;

const std::vector<std::string> kGpus{"/gpu:0", "/gpu:1"};
const std::vector<std::string> kCpus{"/cpu:0", "/cpu:1"};

class CheckpointGpu : public chorus::testing::TwoVirtualGpusTest<256> {
 protected:
  void SetUp() override {
    TwoVirtualGpusTest::SetUp();
    if (IsSkipped()) return;
    // Two logical CPU devices as well, for the CPU-only strategies.
    config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                             {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  }
};

// The raw bytes of a tensor (any device, any dtype): bitwise comparisons.
std::vector<std::uint8_t> bytes(const Tensor& t) {
  std::vector<std::uint8_t> out(t.nbytes());
  if (!out.empty()) t.copy_to_host(out.data());
  return out;
}

std::vector<float> uniform(std::size_t n, std::mt19937& rng, float lo = -3.0f, float hi = 3.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::shared_ptr<MirroredVariable> mirrored(const Variable& v) {
  auto m = std::dynamic_pointer_cast<MirroredVariable>(v.impl());
  EXPECT_NE(m, nullptr) << v.name() << " is not mirrored";
  return m;
}

// Host values a set of variables is made from (and must come back as).
struct Values {
  std::vector<float> w;               // float32 [37, 5], ON_WRITE
  std::vector<double> d;              // float64 [11], ON_WRITE
  std::vector<std::int64_t> step;     // int64 [3], ON_WRITE
  std::vector<float> bf;              // [64] stored as bfloat16 (the float32 values rounded through it)
  std::vector<float> total0, total1;  // ON_READ SUM float32 [4]: replica 0's and 1's components
};

Values draw_values(std::uint32_t seed) {
  std::mt19937 rng(seed);
  Values v;
  v.w = uniform(37 * 5, rng);
  for (float x : uniform(11, rng)) v.d.push_back(static_cast<double>(x) * 1e3 + 1e-9);
  v.step = {static_cast<std::int64_t>(rng()), -static_cast<std::int64_t>(rng() % 1000), std::int64_t{1} << 40};
  v.bf = ops::cast(ops::cast(Tensor::from_vector<float>(uniform(64, rng), {64}), DType::kBFloat16), DType::kFloat32)
             .to_vector<float>();
  v.total0 = uniform(4, rng);
  v.total1 = uniform(4, rng);
  return v;
}

struct Vars {
  Variable w, d, step, bf, total;
};

// Created in the current strategy's scope (or none) with `v`'s values; `total`'s components get
// total0 / total1 when it is mirrored over two replicas.
Vars make_vars(const Values& v) {
  Vars out;
  out.w = make_variable({.initial_value = Tensor::from_vector<float>(v.w, {37, 5}),
                         .name = "w",
                         .aggregation = VariableAggregation::kMean});
  out.d = make_variable({.initial_value = Tensor::from_vector<double>(v.d, {11}), .name = "d"});
  out.step = make_variable({.initial_value = Tensor::from_vector<std::int64_t>(v.step, {3}),
                            .name = "step",
                            .trainable = false,
                            .aggregation = VariableAggregation::kOnlyFirstReplica});
  out.bf = make_variable(
      {.initial_value = ops::cast(Tensor::from_vector<float>(v.bf, {64}), DType::kBFloat16), .name = "bf"});
  out.total = make_variable({.initial_value = Tensor::zeros({4}),
                             .name = "total",
                             .trainable = false,
                             .synchronization = VariableSynchronization::kOnRead,
                             .aggregation = VariableAggregation::kSum});
  if (auto m = std::dynamic_pointer_cast<MirroredVariable>(out.total.impl()); m && m->components().size() == 2) {
    m->components()[0].impl()->assign(Tensor::from_vector<float>(v.total0, {4}));
    m->components()[1].impl()->assign(Tensor::from_vector<float>(v.total1, {4}));
  } else {
    std::vector<float> sum(4);
    for (std::size_t i = 0; i < 4; ++i) sum[i] = v.total0[i] + v.total1[i];
    out.total.assign(Tensor::from_vector<float>(sum, {4}));
  }
  return out;
}

Checkpoint checkpoint_of(const Vars& v) {
  return Checkpoint({{"w", v.w}, {"d", v.d}, {"step", v.step}, {"bf", v.bf}, {"total", v.total}});
}

std::vector<float> sum_of(const Values& v) {
  std::vector<float> s(4);
  for (std::size_t i = 0; i < 4; ++i) s[i] = v.total0[i] + v.total1[i];
  return s;
}

// Every component of `vars` on its replica's device holds exactly `v` (ON_READ SUM: sum / replicas).
void expect_components_hold(const Vars& vars, const Values& v, const std::vector<std::string>& devices) {
  const std::vector<std::pair<const Variable*, Tensor>> want = {
      {&vars.w, Tensor::from_vector<float>(v.w, {37, 5})},
      {&vars.d, Tensor::from_vector<double>(v.d, {11})},
      {&vars.step, Tensor::from_vector<std::int64_t>(v.step, {3})},
      {&vars.bf, ops::cast(Tensor::from_vector<float>(v.bf, {64}), DType::kBFloat16)}};
  for (const auto& [var, value] : want) {
    auto m = mirrored(*var);
    ASSERT_EQ(m->components().size(), devices.size());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      const Variable& c = m->components()[r];
      EXPECT_EQ(c.device(), runtime::find(devices[r])->name()) << var->name() << " replica " << r;
      EXPECT_EQ(c.dtype(), value.dtype()) << var->name();
      EXPECT_EQ(bytes(c.read_value()), bytes(value)) << var->name() << " replica " << r;
    }
  }
  auto total = mirrored(vars.total);
  const auto sum = sum_of(v);
  for (std::size_t r = 0; r < devices.size(); ++r) {
    EXPECT_EQ(total->components()[r].device(), runtime::find(devices[r])->name());
    const auto got = total->components()[r].read_value().to_vector<float>();
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_FLOAT_EQ(got[i], sum[i] / static_cast<float>(devices.size())) << "total replica " << r << " at " << i;
  }
}

TEST_F(CheckpointGpu, MirroredVariablesComeBackOnEachGpu) {
  TempDir dir;
  const Values saved = draw_values(1), other = draw_values(2);
  MirroredStrategy strategy(kGpus);
  auto scope = strategy.scope();
  Vars vars = make_vars(saved);
  ASSERT_EQ(mirrored(vars.w)->components()[1].device(), runtime::find("/gpu:1")->name());
  Checkpoint ckpt = checkpoint_of(vars);
  const std::string path = ckpt.save(dir / "ckpt");

  // The file holds the host values: ON_WRITE once (bitwise), ON_READ SUM as the components' sum.
  {
    BundleReader r(path);
    EXPECT_EQ(bytes(r.read("w/.ATTRIBUTES/VARIABLE_VALUE")), bytes(Tensor::from_vector<float>(saved.w, {37, 5})));
    EXPECT_EQ(bytes(r.read("d/.ATTRIBUTES/VARIABLE_VALUE")), bytes(Tensor::from_vector<double>(saved.d, {11})));
    EXPECT_EQ(r.read("step/.ATTRIBUTES/VARIABLE_VALUE").to_vector<std::int64_t>(), saved.step);
    EXPECT_EQ(r.read("bf/.ATTRIBUTES/VARIABLE_VALUE").dtype(), DType::kBFloat16);
    EXPECT_EQ(ops::cast(r.read("bf/.ATTRIBUTES/VARIABLE_VALUE"), DType::kFloat32).to_vector<float>(), saved.bf);
    const auto total = r.read("total/.ATTRIBUTES/VARIABLE_VALUE").to_vector<float>();
    const auto sum = sum_of(saved);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(total[i], sum[i]);
  }

  // Change everything — the two replicas even differently — then restore.
  {
    Vars changed = make_vars(other);  // fresh values written into the same variables below
    vars.w.assign(changed.w.value());
    vars.d.assign(changed.d.value());
    vars.step.assign(changed.step.value());
    vars.bf.assign(changed.bf.value());
    vars.total.assign(changed.total.value());
    mirrored(vars.w)->components()[1].impl()->assign(Tensor::full({37, 5}, 7.0));
  }
  ASSERT_NE(bytes(mirrored(vars.w)->components()[0].read_value()), bytes(Tensor::from_vector<float>(saved.w, {37, 5})));
  ckpt.restore(path).assert_consumed();
  expect_components_hold(vars, saved, kGpus);
}

TEST_F(CheckpointGpu, GpuCheckpointRestoresIntoCpuOnlyStrategiesAndBack) {
  TempDir dir;
  const Values saved = draw_values(3), other = draw_values(4);
  std::string from_gpus;
  {
    MirroredStrategy on_gpus(kGpus);
    auto scope = on_gpus.scope();
    Vars vars = make_vars(saved);
    from_gpus = checkpoint_of(vars).write(dir / "from_gpus");
  }
  // Two CPU replicas.
  std::string from_cpus;
  {
    MirroredStrategy on_cpus(kCpus);
    auto scope = on_cpus.scope();
    Vars vars = make_vars(other);
    checkpoint_of(vars).read(from_gpus).assert_consumed();
    expect_components_hold(vars, saved, kCpus);
    from_cpus = checkpoint_of(vars).write(dir / "from_cpus");
  }
  // One CPU replica (a single-device strategy, as a CPU-only program would have).
  {
    MirroredStrategy on_cpu({"/cpu:0"});
    auto scope = on_cpu.scope();
    Vars vars = make_vars(other);
    checkpoint_of(vars).read(from_gpus).assert_consumed();
    EXPECT_EQ(bytes(vars.w.read_value()), bytes(Tensor::from_vector<float>(saved.w, {37, 5})));
    EXPECT_EQ(vars.w.device(), runtime::find("/cpu:0")->name());
    const auto total = vars.total.read_value().to_vector<float>();
    const auto sum = sum_of(saved);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(total[i], sum[i]);
  }
  // And the CPU checkpoint back onto the GPUs.
  {
    MirroredStrategy on_gpus(kGpus);
    auto scope = on_gpus.scope();
    Vars vars = make_vars(other);
    checkpoint_of(vars).read(from_cpus).assert_consumed();
    expect_components_hold(vars, saved, kGpus);
  }
}

TEST_F(CheckpointGpu, AsyncSaveSnapshotsGpuValuesBeforeTrainingGoesOn) {
  TempDir dir;
  std::mt19937 rng(5);
  const std::int64_t n = std::int64_t{1} << 20;  // 4 MiB: the copy to the host takes a moment
  const std::vector<float> first = uniform(static_cast<std::size_t>(n), rng);
  MirroredStrategy strategy(kGpus);
  auto scope = strategy.scope();
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>(first, {n}), .name = "w"});
  Checkpoint ckpt({{"w", w}});
  const std::string path = ckpt.save(dir / "ckpt", {.async = true});
  // Training goes on at once: each update is queued on the GPUs' streams behind the snapshot.
  for (int i = 0; i < 20; ++i) w.assign_add(Tensor::full({n}, 1.0, DType::kFloat32, "/gpu:0"));
  ckpt.sync();
  EXPECT_EQ(bytes(BundleReader(path).read("w/.ATTRIBUTES/VARIABLE_VALUE")),
            bytes(Tensor::from_vector<float>(first, {n})));
  // The variables went on: both components hold first + 1 + ... + 1 (twenty float32 additions).
  for (const Variable& c : mirrored(w)->components()) {
    const auto got = c.read_value().to_vector<float>();
    for (std::size_t i = 0; i < got.size(); i += 4099) {
      float want = first[i];
      for (int k = 0; k < 20; ++k) want += 1.0f;
      ASSERT_EQ(got[i], want) << i;
    }
  }
  // A second async save of the changed values, then a restore of the first: the first comes back.
  const std::string second = ckpt.save(dir / "ckpt", {.async = true});
  EXPECT_NE(second, path);
  ckpt.restore(path).assert_consumed();
  for (const Variable& c : mirrored(w)->components())
    EXPECT_EQ(bytes(c.read_value()), bytes(Tensor::from_vector<float>(first, {n})));
}

// A model and its Adam state on two GPUs: saved mid-training, trained further, restored — the
// restored state is bitwise the saved one, and training again from it reproduces the first
// continuation (which it would not if a slot or the iteration count had been lost).
data::Dataset blobs(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<float> x(static_cast<std::size_t>(3 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i % 3;
    for (int k = 0; k < 3; ++k) x[static_cast<std::size_t>(3 * i + k)] = (k == i % 3 ? 1.0f : 0.0f) + nd(rng);
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 3}), Tensor::from_vector<std::int32_t>(y)});
}

std::vector<Variable> state(const model::Model& m) {
  std::vector<Variable> vars = m.variables();
  for (const auto& v : m.optimizer().variables()) vars.push_back(v);
  return vars;
}

std::vector<std::vector<std::uint8_t>> snapshot(const model::Model& m) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const auto& v : state(m))
    for (const Variable& c : mirrored(v)->components()) out.push_back(bytes(c.read_value()));
  return out;
}

TEST_F(CheckpointGpu, ModelAndAdamStateResumeExactly) {
  TempDir dir;
  MirroredStrategy strategy(kGpus);
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(16, "relu", true, initializers::glorot_uniform(1)),
                                      layers::Dense(3, "", true, initializers::glorot_uniform(2))});
    m->compile(std::make_shared<optimizers::Adam>(1e-2), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  }
  const auto ds = blobs(96, 9).batch(32);
  m->fit(ds, {.epochs = 2, .verbose = 0});
  const auto saved = snapshot(*m);
  Checkpoint ckpt({{"model", *m}});
  std::string path;
  {
    auto scope = strategy.scope();
    path = ckpt.save(dir / "model");
  }
  m->fit(ds, {.epochs = 1, .verbose = 0});
  const auto continued = snapshot(*m);
  ASSERT_NE(continued, saved);
  {
    auto scope = strategy.scope();
    ckpt.restore(path).assert_consumed();
  }
  const auto restored = snapshot(*m);
  ASSERT_EQ(restored.size(), saved.size());
  const auto vars = state(*m);
  for (std::size_t i = 0, k = 0; i < vars.size(); ++i) {
    const auto& comps = mirrored(vars[i])->components();
    for (std::size_t r = 0; r < comps.size(); ++r, ++k) {
      EXPECT_EQ(comps[r].device(), strategy.replica_devices()[r]) << vars[i].name();
      EXPECT_EQ(restored[k], saved[k]) << vars[i].name() << " replica " << r;
    }
  }
  // Training again from the restored state gives the first continuation back (float32 rounding
  // aside: compare as floats).
  m->fit(ds, {.epochs = 1, .verbose = 0});
  std::size_t k = 0;
  for (const auto& v : state(*m)) {
    for (const Variable& c : mirrored(v)->components()) {
      const Tensor now = c.read_value();
      if (now.dtype() == DType::kFloat32) {
        std::vector<float> a(static_cast<std::size_t>(now.num_elements())), b(a.size());
        std::memcpy(a.data(), bytes(now).data(), a.size() * sizeof(float));
        std::memcpy(b.data(), continued[k].data(), b.size() * sizeof(float));
        for (std::size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], 1e-5 * (1 + std::abs(b[j]))) << v.name();
      } else {
        EXPECT_EQ(bytes(now), continued[k]) << v.name();  // the iteration count
      }
      ++k;
    }
  }
}

}  // namespace
}  // namespace chorus::train
