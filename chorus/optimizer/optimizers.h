// All of optimizer/ (tf.keras.optimizers): SGD, Adam, AdamW, RMSprop, learning-rate schedules,
// gradient clipping and loss scaling (tf.keras.mixed_precision.LossScaleOptimizer). See each
// header for its contract; optimizer/optimizer.h for what every optimizer's apply_gradients does
// under a distribution strategy.
#pragma once

#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/clipping.h>
#include <chorus/optimizer/learning_rate_schedule.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/optimizer.h>
#include <chorus/optimizer/rmsprop.h>
#include <chorus/optimizer/sgd.h>
