// The subclass route of docs/functional.md: a model::Model subclass that creates its layers with
// track() and composes them in call(), plus a layer that owns layers (track_layer), trained with
// fit under MirroredStrategy on two logical CPU devices, then saved with save_weights and loaded
// into a fresh instance. Built and run by CTest; exits non-zero unless the loss fell to a fifth
// and the reloaded model predicts what the trained one does.
#include <chorus/chorus.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace cx = chorus;

// A layer that owns layers: x + down(up(x)).
class ResidualBlock : public cx::layers::Layer {
 public:
  ResidualBlock() : cx::layers::Layer("") {
    up_ = track_layer(cx::layers::Dense(16, "relu"), "up");
    down_ = track_layer(cx::layers::Dense(4), "down");
  }
  std::string class_name() const override { return "ResidualBlock"; }

 protected:
  cx::Tensor call(const cx::Tensor& x, bool training) override { return x + (*down_)((*up_)(x, training), training); }

 private:
  cx::layers::LayerPtr up_, down_;
};

// The model: two towers multiplied, a residual block, a head.
class TwoTower : public cx::model::Model {
 public:
  TwoTower() : cx::model::Model("two_tower") {
    left_ = track(cx::layers::Dense(4, "relu"));
    right_ = track(cx::layers::Dense(4, "tanh"));
    block_ = track(std::make_shared<ResidualBlock>());
    head_ = track(cx::layers::Dense(1));
  }

 protected:
  cx::Tensor call(const cx::Tensor& x, bool training) override {
    cx::Tensor h = (*left_)(x, training) * (*right_)(x, training);
    return (*head_)((*block_)(h, training), training);
  }

 private:
  cx::layers::LayerPtr left_, right_, block_, head_;
};

int main(int argc, char** argv) {
  const char* usage =
      "usage: subclass_model\n  a subclassed Model trained under MirroredStrategy on two logical CPUs\n";
  if (auto rc = cx::launch::answer_help_or_version(argc, argv, "subclass_model", usage)) return *rc;
  if (argc > 1) return cx::launch::usage_error("subclass_model", argv[1], usage);
  auto cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  cx::distribute::MirroredStrategy strategy;

  // y = x0·x1 − x2 on 256 rows: the product of the towers can express it.
  std::vector<float> xs, ys;
  for (int i = 0; i < 256; ++i) {
    const float a = std::sin(0.37f * i), b = std::cos(0.71f * i), c = std::sin(1.3f * i + 0.5f);
    xs.insert(xs.end(), {a, b, c});
    ys.push_back(a * b - c);
  }
  auto ds = cx::data::Dataset::from_tensor_slices(
                {cx::Tensor::from_vector<float>(xs, {256, 3}), cx::Tensor::from_vector<float>(ys, {256, 1})})
                .batch(32);

  auto scope = strategy.scope();
  TwoTower model;
  model.compile(std::make_shared<cx::optimizers::Adam>(cx::optimizers::AdamOptions{.learning_rate = 1e-2}),
                std::make_shared<cx::losses::MeanSquaredError>());
  const cx::model::History h = model.fit(ds, {.epochs = 30, .verbose = 0});
  const double first = h.history.at("loss").front(), last = h.history.at("loss").back();
  std::printf("loss: epoch 1 %.4f, epoch 30 %.4f (%zu weights: %s, ...)\n", first, last,
              model.trainable_variables().size(), model.trainable_variables()[4].name().c_str());

  const std::string dir = (std::filesystem::temp_directory_path() / "chorus_subclass_model").string();
  std::filesystem::create_directories(dir);
  model.save_weights(dir + "/weights");
  TwoTower fresh;
  fresh.load_weights(dir + "/weights");  // waits for the build, which the first call does
  const cx::Tensor x = cx::Tensor::from_vector<float>({0.1f, 0.2f, 0.3f}, {1, 3});
  const float a = model(x).to_vector<float>()[0], b = fresh(x).to_vector<float>()[0];
  std::printf("trained model: %.6f, reloaded: %.6f\n", a, b);
  std::filesystem::remove_all(dir);
  if (!(last < first / 5)) {
    std::cerr << "the loss did not fall to a fifth\n";
    return 1;
  }
  if (a != b) {
    std::cerr << "the reloaded model predicts another value\n";
    return 1;
  }
  return 0;
}
