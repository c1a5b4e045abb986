// Losses (tf.keras.losses) and compute_average_loss (tf.nn.compute_average_loss).
//
//   losses::SparseCategoricalCrossentropy loss(/*from_logits=*/true);
//   Tensor per_example = loss.per_example(labels, logits);           // [batch]
//   Tensor scalar = loss(labels, logits);                            // mean over the batch
//   Tensor replica_loss = losses::compute_average_loss(per_example, global_batch_size);
//
// Under a strategy each replica sees only its slice of the global batch: the loss to
// differentiate is sum(per_example) / global_batch_size (compute_average_loss), so that summing
// the replicas' gradients gives the gradient of the global mean — what Keras's fit does and what
// TF's custom-training-loop guide prescribes. An empty slice contributes 0.
// Probabilities are clipped to [1e-7, 1 - 1e-7] before the log when from_logits is false (Keras).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <chorus/core/tensor.h>

namespace chorus::losses {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  // One value per example ([batch]; more dims are averaged over the last axis as Keras).
  virtual Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const = 0;
  // Mean of per_example over the batch (Keras's SUM_OVER_BATCH_SIZE); 0 for an empty batch.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
};
using LossPtr = std::shared_ptr<const Loss>;

class SparseCategoricalCrossentropy final : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  // y_true: int32/int64 class ids [batch]; y_pred: [batch, classes]. A sequence: y_true
  // [batch, T], y_pred [batch, T, classes] → each example's loss is the mean over its T positions
  // (so the mean over the batch is Keras's mean over every position, a language model's loss).
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  bool from_logits_;
};

class CategoricalCrossentropy final : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "categorical_crossentropy"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  bool from_logits_;
};

class BinaryCrossentropy final : public Loss {
 public:
  explicit BinaryCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "binary_crossentropy"; }
  // Mean over the last axis of the elementwise binary cross-entropy.
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  bool from_logits_;
};

class MeanSquaredError final : public Loss {
 public:
  std::string name() const override { return "mean_squared_error"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
};

// sum(per_example_loss) / global_batch_size. global_batch_size 0: the replica's batch times
// num_replicas_in_sync (TF's default). A non-floating or non-1-D input → InvalidArgumentError.
Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size = 0);

}  // namespace chorus::losses
