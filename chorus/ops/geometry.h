// Geometry of 2-D convolutions and pooling in TensorFlow's NHWC layout (C++17: used by .cu files).
//
// TF's rules: 'VALID' → out = ceil((in - (k - 1) * dilation) / stride), no padding;
// 'SAME' → out = ceil(in / stride), total padding max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0),
// the smaller half on the top/left (pad_top = total / 2), the extra element on the bottom/right.
// Filters are HWIO ([kh, kw, c_in / groups, c_out]) as in tf.nn.conv2d. Grouped convolution (groups > 1):
// input channel block i (in_c / groups channels) feeds output channel block i (out_c / groups
// channels) only; output channel o reads the input block o / (out_c / groups). groups == in_c is a
// depthwise convolution.
#pragma once

#include <cstdint>

#include <chorus/ops/kinds.h>

namespace chorus::ops {

struct Conv2dGeometry {
  std::int64_t n = 0, in_h = 0, in_w = 0, in_c = 0;  // input  [n, in_h, in_w, in_c]
  std::int64_t k_h = 0, k_w = 0, out_c = 0;          // filter [k_h, k_w, filter_in_c(), out_c] (pooling: out_c = in_c)
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t dilation_h = 1, dilation_w = 1;  // pooling: 1
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  std::int64_t out_h = 0, out_w = 0;  // output [n, out_h, out_w, out_c]
  std::int64_t groups = 1;            // divides in_c and out_c (pooling: 1)

  // The filter's input channels (its dim 2): in_c / groups.
  std::int64_t filter_in_c() const { return groups > 0 ? in_c / groups : 0; }
  std::int64_t input_elements() const { return n * in_h * in_w * in_c; }
  std::int64_t filter_elements() const { return k_h * k_w * filter_in_c() * out_c; }
  std::int64_t output_elements() const { return n * out_h * out_w * out_c; }
};

// Fills pads and output size from the other fields. Returns false when the output would be empty
// or negative (the filter, dilated, is larger than the input under VALID); the op layer turns that
// into InvalidArgumentError with the numbers.
inline bool compute_output_size(Conv2dGeometry& g, Padding padding) {
  auto one = [padding](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, std::int64_t& out,
                       std::int64_t& lo, std::int64_t& hi) {
    const std::int64_t eff = (k - 1) * d + 1;
    if (padding == Padding::kValid) {
      if (in < eff) return false;
      out = (in - eff + s) / s;
      lo = hi = 0;
    } else {
      out = (in + s - 1) / s;
      std::int64_t total = (out - 1) * s + eff - in;
      if (total < 0) total = 0;
      lo = total / 2;
      hi = total - lo;
    }
    return out > 0;
  };
  return one(g.in_h, g.k_h, g.stride_h, g.dilation_h, g.out_h, g.pad_top, g.pad_bottom) &&
         one(g.in_w, g.k_w, g.stride_w, g.dilation_w, g.out_w, g.pad_left, g.pad_right);
}

}  // namespace chorus::ops
