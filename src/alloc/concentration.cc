#include "squeezekv/alloc/concentration.h"

#include <cmath>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"

namespace squeezekv {

double concentration_score(const float* keys, int n, int head_dim) {
  if (n < 2) return 0.0;
  // A NaN or inf key would make the score NaN, and a NaN budget schedule after it.
  for (size_t i = 0; i < size_t(n) * size_t(head_dim); ++i) {
    if (!std::isfinite(keys[i])) {
      require(false, "keys[" + std::to_string(i) + "]", keys[i], "concentration_score needs finite keys");
    }
  }
  // sum_{i != j} u_i . u_j = ||sum_j u_j||^2 - sum_j ||u_j||^2, accumulated in double so the
  // cancellation stays exact to well below 1e-5 even for thousands of near-identical keys.
  std::vector<double> sum(size_t(head_dim), 0.0);
  double self = 0.0;
  for (int j = 0; j < n; ++j) {
    const float* k = keys + size_t(j) * size_t(head_dim);
    float sq = 0.0f;
    for (int d = 0; d < head_dim; ++d) sq += k[d] * k[d];
    const double inv = 1.0 / (std::sqrt(double(sq)) + 1e-8);
    double norm_sq = 0.0;
    for (int d = 0; d < head_dim; ++d) {
      const double u = k[d] * inv;
      sum[size_t(d)] += u;
      norm_sq += u * u;
    }
    self += norm_sq;
  }
  double total = 0.0;
  for (double s : sum) total += s * s;
  return (total - self) / (double(n) * double(n - 1));
}

double concentration_score(const float* keys, int n_heads, int n, int head_dim) {
  if (n_heads <= 0) return 0.0;
  double acc = 0.0;
  for (int h = 0; h < n_heads; ++h) {
    acc += concentration_score(keys + size_t(h) * size_t(n) * size_t(head_dim), n, head_dim);
  }
  return acc / n_heads;
}

double concentration_score_pairwise(const float* keys, int n, int head_dim) {
  if (n < 2) return 0.0;
  std::vector<double> unit(size_t(n) * size_t(head_dim));
  for (int j = 0; j < n; ++j) {
    double sq = 0.0;
    for (int d = 0; d < head_dim; ++d)
      sq += double(keys[size_t(j) * size_t(head_dim) + size_t(d)]) * keys[size_t(j) * size_t(head_dim) + size_t(d)];
    const double inv = 1.0 / (std::sqrt(sq) + 1e-8);
    for (int d = 0; d < head_dim; ++d) {
      unit[size_t(j) * size_t(head_dim) + size_t(d)] = keys[size_t(j) * size_t(head_dim) + size_t(d)] * inv;
    }
  }
  double acc = 0.0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      double dot = 0.0;
      for (int d = 0; d < head_dim; ++d) {
        dot += unit[size_t(i) * size_t(head_dim) + size_t(d)] * unit[size_t(j) * size_t(head_dim) + size_t(d)];
      }
      acc += dot;
    }
  }
  return acc / (double(n) * double(n - 1));
}

}  // namespace squeezekv
