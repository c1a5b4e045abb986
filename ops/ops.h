// All of ops/: tensor math and autograd (see each header for its contract).
#pragma once

#include "ops/determinism.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/kinds.h"
#include "ops/linalg.h"
#include "ops/nn.h"
#include "ops/random.h"
#include "ops/reduction.h"
#include "ops/shape_ops.h"
#include "ops/tape.h"
