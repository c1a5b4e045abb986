// All of optimizer/ (tf.keras.optimizers): SGD, Adam, AdamW, RMSprop, learning-rate schedules,
// gradient clipping and loss scaling (tf.keras.mixed_precision.LossScaleOptimizer). See each
// header for its contract; optimizer/optimizer.h for what every optimizer's apply_gradients does
// under a distribution strategy.
#pragma once

#include "optimizer/adam.h"
#include "optimizer/clipping.h"
#include "optimizer/learning_rate_schedule.h"
#include "optimizer/loss_scale_optimizer.h"
#include "optimizer/optimizer.h"
#include "optimizer/rmsprop.h"
#include "optimizer/sgd.h"
