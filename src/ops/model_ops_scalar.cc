// Scalar twins of the SIMD kernels in model_ops.cc (test oracles), plus the kernels that are
// scalar only: argmax and logsumexp.
#include <cmath>

#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

void rms_norm_scalar(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (n <= 0) return;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
}

void softmax_inplace_scalar(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace_scalar(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void mul_inplace_scalar(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] *= src[i];
}

void scale_inplace_scalar(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void axpy_scalar(float* dst, const float* src, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) {
    const float product = src[i] * a;  // a separate statement keeps it unfused, as the SIMD kernel
    dst[i] = dst[i] + product;
  }
}

float dot_scalar(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

double logsumexp(const float* x, int64_t n) {
  double max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, static_cast<double>(x[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  return max + std::log(sum);
}

}  // namespace squeezekv
