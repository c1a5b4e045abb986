// All of ops/: tensor math and autograd (see each header for its contract).
#pragma once

#include <chorus/ops/attention.h>
#include <chorus/ops/determinism.h>
#include <chorus/ops/dropout.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/image.h>
#include <chorus/ops/kinds.h>
#include <chorus/ops/linalg.h>
#include <chorus/ops/nn.h>
#include <chorus/ops/normalization.h>
#include <chorus/ops/random.h>
#include <chorus/ops/recompute.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/tape.h>
