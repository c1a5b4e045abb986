// Reference loops (see reference.h). Written for clarity first: each output is a sum gathered
// by one thread in a fixed order (no atomics, no thread-count dependence), accumulated in double.
#include <chorus/ops/cpu/reference.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace chorus::ops::cpu::reference {
namespace {

// Input coordinate of output position `o`, tap `t` along one axis.
inline std::int64_t tap(std::int64_t o, std::int64_t t, std::int64_t stride, std::int64_t dilation, std::int64_t pad) {
  return o * stride - pad + t * dilation;
}

}  // namespace

template <typename T>
void matmul(const T* a, std::int64_t a_batch_stride, const T* b, std::int64_t b_batch_stride, T* c, std::int64_t batch,
            std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b) {
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<std::size_t>(n));
#pragma omp for collapse(2) schedule(static)
    for (std::int64_t bi = 0; bi < batch; ++bi) {
      for (std::int64_t i = 0; i < m; ++i) {
        const T* ab = a + bi * a_batch_stride;
        const T* bb = b + bi * b_batch_stride;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t p = 0; p < k; ++p) {
          const double av = trans_a ? ab[p * m + i] : ab[i * k + p];
          if (trans_b) {
            for (std::int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<double>(bb[j * k + p]);
          } else {
            const T* brow = bb + p * n;
            for (std::int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<double>(brow[j]);
          }
        }
        T* crow = c + (bi * m + i) * n;
        for (std::int64_t j = 0; j < n; ++j) crow[j] = static_cast<T>(acc[j]);
      }
    }
  }
}

template <typename T>
void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, T* y) {
  // Group gi: input channels [gi·fc, (gi+1)·fc) feed output channels [gi·og, (gi+1)·og).
  const std::int64_t fc = g.filter_in_c(), og = g.out_c / g.groups;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<std::size_t>(g.out_c));
#pragma omp for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < g.n; ++n) {
      for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
        for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t kh = 0; kh < g.k_h; ++kh) {
            const std::int64_t ih = tap(oh, kh, g.stride_h, g.dilation_h, g.pad_top);
            if (ih < 0 || ih >= g.in_h) continue;
            for (std::int64_t kw = 0; kw < g.k_w; ++kw) {
              const std::int64_t iw = tap(ow, kw, g.stride_w, g.dilation_w, g.pad_left);
              if (iw < 0 || iw >= g.in_w) continue;
              const T* xp = x + ((n * g.in_h + ih) * g.in_w + iw) * g.in_c;
              for (std::int64_t gi = 0; gi < g.groups; ++gi) {
                for (std::int64_t ic = 0; ic < fc; ++ic) {
                  const double xv = xp[gi * fc + ic];
                  const T* wrow = w + ((kh * g.k_w + kw) * fc + ic) * g.out_c;
                  for (std::int64_t oc = gi * og; oc < (gi + 1) * og; ++oc)
                    acc[oc] += xv * static_cast<double>(wrow[oc]);
                }
              }
            }
          }
          T* yp = y + ((n * g.out_h + oh) * g.out_w + ow) * g.out_c;
          for (std::int64_t oc = 0; oc < g.out_c; ++oc) yp[oc] = static_cast<T>(acc[oc]);
        }
      }
    }
  }
}

template <typename T>
void conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  // dx[n, ih, iw, ic] = sum over taps (kh, kw) and outputs (oh, ow) that read (ih, iw), over the
  // output channels of ic's group.
  const std::int64_t fc = g.filter_in_c(), og = g.out_c / g.groups;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<std::size_t>(g.in_c));
#pragma omp for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < g.n; ++n) {
      for (std::int64_t ih = 0; ih < g.in_h; ++ih) {
        for (std::int64_t iw = 0; iw < g.in_w; ++iw) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t kh = 0; kh < g.k_h; ++kh) {
            const std::int64_t th = ih + g.pad_top - kh * g.dilation_h;  // = oh * stride_h
            if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= g.out_h) continue;
            const std::int64_t oh = th / g.stride_h;
            for (std::int64_t kw = 0; kw < g.k_w; ++kw) {
              const std::int64_t tw = iw + g.pad_left - kw * g.dilation_w;
              if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= g.out_w) continue;
              const std::int64_t ow = tw / g.stride_w;
              const T* dyp = dy + ((n * g.out_h + oh) * g.out_w + ow) * g.out_c;
              for (std::int64_t ic = 0; ic < g.in_c; ++ic) {
                const std::int64_t gi = ic / fc;  // ic's group: its outputs are [gi·og, (gi+1)·og)
                const T* wrow = w + ((kh * g.k_w + kw) * fc + ic % fc) * g.out_c;
                double s = 0;
                for (std::int64_t oc = gi * og; oc < (gi + 1) * og; ++oc) s += static_cast<double>(dyp[oc]) * wrow[oc];
                acc[ic] += s;
              }
            }
          }
          T* dxp = dx + ((n * g.in_h + ih) * g.in_w + iw) * g.in_c;
          for (std::int64_t ic = 0; ic < g.in_c; ++ic) dxp[ic] = static_cast<T>(acc[ic]);
        }
      }
    }
  }
}

template <typename T>
void conv2d_backward_filter(const Conv2dGeometry& g, const T* x, const T* dy, T* dw) {
  // dw[kh, kw, ic, oc] = sum over (n, oh, ow) of x at the tap (channel ic of oc's group) times dy.
  const std::int64_t fc = g.filter_in_c(), og = g.out_c / g.groups;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<std::size_t>(g.out_c));
#pragma omp for collapse(3) schedule(static)
    for (std::int64_t kh = 0; kh < g.k_h; ++kh) {
      for (std::int64_t kw = 0; kw < g.k_w; ++kw) {
        for (std::int64_t ic = 0; ic < fc; ++ic) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t n = 0; n < g.n; ++n) {
            for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
              const std::int64_t ih = tap(oh, kh, g.stride_h, g.dilation_h, g.pad_top);
              if (ih < 0 || ih >= g.in_h) continue;
              for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
                const std::int64_t iw = tap(ow, kw, g.stride_w, g.dilation_w, g.pad_left);
                if (iw < 0 || iw >= g.in_w) continue;
                const T* xp = x + ((n * g.in_h + ih) * g.in_w + iw) * g.in_c + ic;
                const T* dyp = dy + ((n * g.out_h + oh) * g.out_w + ow) * g.out_c;
                for (std::int64_t gi = 0; gi < g.groups; ++gi) {
                  const double xv = xp[gi * fc];
                  for (std::int64_t oc = gi * og; oc < (gi + 1) * og; ++oc)
                    acc[oc] += xv * static_cast<double>(dyp[oc]);
                }
              }
            }
          }
          T* dwrow = dw + ((kh * g.k_w + kw) * fc + ic) * g.out_c;
          for (std::int64_t oc = 0; oc < g.out_c; ++oc) dwrow[oc] = static_cast<T>(acc[oc]);
        }
      }
    }
  }
}

namespace {

// Visits the in-bounds taps of output (n, oh, ow) in row-major window order: f(offset of the
// tap's channel 0 in x).
template <typename F>
void for_each_tap(const Conv2dGeometry& g, std::int64_t n, std::int64_t oh, std::int64_t ow, F&& f) {
  for (std::int64_t kh = 0; kh < g.k_h; ++kh) {
    const std::int64_t ih = tap(oh, kh, g.stride_h, 1, g.pad_top);
    if (ih < 0 || ih >= g.in_h) continue;
    for (std::int64_t kw = 0; kw < g.k_w; ++kw) {
      const std::int64_t iw = tap(ow, kw, g.stride_w, 1, g.pad_left);
      if (iw < 0 || iw >= g.in_w) continue;
      f(((n * g.in_h + ih) * g.in_w + iw) * g.in_c);
    }
  }
}

}  // namespace

template <typename T>
void pool2d_forward(PoolKind kind, const Conv2dGeometry& g, const T* x, T* y) {
  const std::int64_t c = g.in_c;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<std::size_t>(c));
#pragma omp for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < g.n; ++n) {
      for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
        for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
          std::int64_t count = 0;
          for_each_tap(g, n, oh, ow, [&](std::int64_t off) {
            for (std::int64_t ch = 0; ch < c; ++ch) {
              const double v = x[off + ch];
              if (kind == PoolKind::kAvg) {
                acc[ch] = (count == 0 ? 0.0 : acc[ch]) + v;
              } else if (count == 0 || v > acc[ch]) {  // TF's rule: from the lowest T, NaN never wins
                acc[ch] = count == 0 && !(v > static_cast<double>(std::numeric_limits<T>::lowest()))
                              ? static_cast<double>(std::numeric_limits<T>::lowest())
                              : v;
              }
            }
            ++count;
          });
          T* yp = y + ((n * g.out_h + oh) * g.out_w + ow) * c;
          for (std::int64_t ch = 0; ch < c; ++ch) {
            double v = count == 0 ? 0.0 : acc[ch];
            if (kind == PoolKind::kAvg && count > 0) v /= static_cast<double>(count);
            yp[ch] = static_cast<T>(v);
          }
        }
      }
    }
  }
}

template <typename T>
void pool2d_backward(PoolKind kind, const Conv2dGeometry& g, const T* x, const T* dy, T* dx) {
  const std::int64_t c = g.in_c;
  const std::int64_t image = g.in_h * g.in_w * c;
  // Windows overlap, so gradients scatter: one image per thread keeps the sums race-free and in a
  // fixed order.
#pragma omp parallel
  {
    std::vector<double> grad(static_cast<std::size_t>(image));
    std::vector<double> best(static_cast<std::size_t>(c));
    std::vector<std::int64_t> arg(static_cast<std::size_t>(c));
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < g.n; ++n) {
      std::fill(grad.begin(), grad.end(), 0.0);
      const std::int64_t base = n * image;
      for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
        for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
          const T* dyp = dy + ((n * g.out_h + oh) * g.out_w + ow) * c;
          std::int64_t count = 0;
          for_each_tap(g, n, oh, ow, [&](std::int64_t off) {
            if (kind == PoolKind::kMax) {
              for (std::int64_t ch = 0; ch < c; ++ch) {
                const double v = x[off + ch];
                if (count == 0) {  // TF's rule, as the forward: from the lowest T and the first tap
                  best[ch] = static_cast<double>(std::numeric_limits<T>::lowest());
                  arg[ch] = off + ch - base;
                }
                if (v > best[ch]) {
                  best[ch] = v;
                  arg[ch] = off + ch - base;
                }
              }
            }
            ++count;
          });
          if (count == 0) continue;
          if (kind == PoolKind::kMax) {
            for (std::int64_t ch = 0; ch < c; ++ch) grad[arg[ch]] += dyp[ch];
          } else {
            const double inv = 1.0 / static_cast<double>(count);
            for_each_tap(g, n, oh, ow, [&](std::int64_t off) {
              for (std::int64_t ch = 0; ch < c; ++ch) grad[off - base + ch] += inv * dyp[ch];
            });
          }
        }
      }
      for (std::int64_t i = 0; i < image; ++i) dx[base + i] = static_cast<T>(grad[i]);
    }
  }
}

template <typename T>
void softmax_forward(bool log, const T* x, T* y, std::int64_t rows, std::int64_t cols) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < cols; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
    double sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(xr[j]) - mx);
    const double log_sum = std::log(sum);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double z = static_cast<double>(xr[j]) - mx;
      yr[j] = static_cast<T>(log ? z - log_sum : std::exp(z) / sum);
    }
  }
}

template <typename T>
void softmax_backward(bool log, const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  // softmax:     dx = y * (dy - sum(dy * y))
  // log-softmax: dx = dy - exp(y) * sum(dy)
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    double s = 0;
    for (std::int64_t j = 0; j < cols; ++j)
      s += log ? static_cast<double>(dyr[j]) : static_cast<double>(dyr[j]) * yr[j];
    for (std::int64_t j = 0; j < cols; ++j) {
      const double yv = yr[j], dyv = dyr[j];
      dxr[j] = static_cast<T>(log ? dyv - std::exp(yv) * s : yv * (dyv - s));
    }
  }
}

namespace {

// Per-channel mean and biased variance (two passes), sequential over rows so the sums are fixed.
template <typename T>
void channel_moments(const T* x, std::int64_t rows, std::int64_t channels, std::vector<double>& mean,
                     std::vector<double>& var) {
  mean.assign(static_cast<std::size_t>(channels), 0.0);
  var.assign(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t ch = 0; ch < channels; ++ch) mean[ch] += x[r * channels + ch];
  for (auto& m : mean) m /= static_cast<double>(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      const double d = x[r * channels + ch] - mean[ch];
      var[ch] += d * d;
    }
  }
  for (auto& v : var) v /= static_cast<double>(rows);
}

template <typename T>
void normalize(const T* x, const T* gamma, const T* beta, const double* mean, const double* var, T* y,
               std::int64_t rows, std::int64_t channels, double epsilon) {
  std::vector<double> scale(static_cast<std::size_t>(channels)), shift(static_cast<std::size_t>(channels));
  for (std::int64_t ch = 0; ch < channels; ++ch) {
    scale[ch] = static_cast<double>(gamma[ch]) / std::sqrt(var[ch] + epsilon);
    shift[ch] = static_cast<double>(beta[ch]) - mean[ch] * scale[ch];
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t ch = 0; ch < channels; ++ch)
      y[r * channels + ch] = static_cast<T>(x[r * channels + ch] * scale[ch] + shift[ch]);
}

}  // namespace

template <typename T>
void batch_norm_training(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* var, std::int64_t rows,
                         std::int64_t channels, double epsilon) {
  std::vector<double> m, v;
  channel_moments(x, rows, channels, m, v);
  normalize(x, gamma, beta, m.data(), v.data(), y, rows, channels, epsilon);
  for (std::int64_t ch = 0; ch < channels; ++ch) {
    mean[ch] = static_cast<T>(m[ch]);
    var[ch] = static_cast<T>(v[ch]);
  }
}

template <typename T>
void batch_norm_inference(const T* x, const T* gamma, const T* beta, const T* mean, const T* var, T* y,
                          std::int64_t rows, std::int64_t channels, double epsilon) {
  std::vector<double> m(mean, mean + channels), v(var, var + channels);
  normalize(x, gamma, beta, m.data(), v.data(), y, rows, channels, epsilon);
}

template <typename T>
void batch_norm_backward(const T* x, const T* dy, const T* gamma, const T* mean, const T* var, T* dx, T* dgamma,
                         T* dbeta, std::int64_t rows, std::int64_t channels, double epsilon) {
  // With xhat = (x - mean) * inv, inv = 1 / sqrt(var + eps), and mean/var functions of x:
  //   dbeta = sum dy, dgamma = sum dy * xhat,
  //   dx = gamma * inv * (dy - dbeta / N - xhat * dgamma / N).
  const auto cs = static_cast<std::size_t>(channels);
  std::vector<double> inv(cs), sum_dy(cs, 0.0), sum_dy_xhat(cs, 0.0);
  for (std::int64_t ch = 0; ch < channels; ++ch) inv[ch] = 1.0 / std::sqrt(static_cast<double>(var[ch]) + epsilon);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      const double xhat = (static_cast<double>(x[r * channels + ch]) - mean[ch]) * inv[ch];
      sum_dy[ch] += dy[r * channels + ch];
      sum_dy_xhat[ch] += dy[r * channels + ch] * xhat;
    }
  }
  const double n = static_cast<double>(rows);
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      const double xhat = (static_cast<double>(x[r * channels + ch]) - mean[ch]) * inv[ch];
      dx[r * channels + ch] = static_cast<T>(static_cast<double>(gamma[ch]) * inv[ch] *
                                             (dy[r * channels + ch] - sum_dy[ch] / n - xhat * sum_dy_xhat[ch] / n));
    }
  }
  for (std::int64_t ch = 0; ch < channels; ++ch) {
    dgamma[ch] = static_cast<T>(sum_dy_xhat[ch]);
    dbeta[ch] = static_cast<T>(sum_dy[ch]);
  }
}

#define CHORUS_INSTANTIATE(T)                                                                                         \
  template void matmul<T>(const T*, std::int64_t, const T*, std::int64_t, T*, std::int64_t, std::int64_t,             \
                          std::int64_t, std::int64_t, bool, bool);                                                    \
  template void conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, T*);                                     \
  template void conv2d_backward_data<T>(const Conv2dGeometry&, const T*, const T*, T*);                               \
  template void conv2d_backward_filter<T>(const Conv2dGeometry&, const T*, const T*, T*);                             \
  template void pool2d_forward<T>(PoolKind, const Conv2dGeometry&, const T*, T*);                                     \
  template void pool2d_backward<T>(PoolKind, const Conv2dGeometry&, const T*, const T*, T*);                          \
  template void softmax_forward<T>(bool, const T*, T*, std::int64_t, std::int64_t);                                   \
  template void softmax_backward<T>(bool, const T*, const T*, T*, std::int64_t, std::int64_t);                        \
  template void batch_norm_training<T>(const T*, const T*, const T*, T*, T*, T*, std::int64_t, std::int64_t, double); \
  template void batch_norm_inference<T>(const T*, const T*, const T*, const T*, const T*, T*, std::int64_t,           \
                                        std::int64_t, double);                                                        \
  template void batch_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, std::int64_t,    \
                                       std::int64_t, double);

CHORUS_INSTANTIATE(float)
CHORUS_INSTANTIATE(double)
#undef CHORUS_INSTANTIATE

}  // namespace chorus::ops::cpu::reference
