#include "squeezekv/engine/reconstruction.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/repacked_weights.h"

namespace squeezekv {

void reconstruction_masks(const int64_t* positions, int n, const ReconstructionSpan& span, float* in_softmax,
                          float* in_chunk) {
  for (int s = 0; s < n; ++s) {
    const int64_t p = positions[s];
    const bool live = p != HeadStore::kFree;
    in_softmax[s] = live && span.in_softmax(p) ? 1.0f : 0.0f;
    in_chunk[s] = live && span.in_chunk(p) ? 1.0f : 0.0f;
  }
}

void reconstruction_weights(const float* in_softmax, const float* in_chunk, const float* probs, size_t group, size_t ld,
                            int hi, float* dst, const OutputWeighting& by) {
  std::fill(dst, dst + hi, 0.0f);
  const auto n = size_t(hi);
  for (size_t i = 0; i < group; ++i) {
    const float* p = probs + i * ld;
    const double in = double(dot(p, in_softmax, int64_t(n)));  // the span's share of the softmax
    if (!(in > 0.0)) continue;
    const auto inv = float(1.0 / in) * by.query_scale;
    if (by.out_norms == nullptr) {
      for (size_t s = 0; s < n; ++s) dst[s] = std::max(dst[s], p[s] * inv * in_chunk[s]);
    } else {
      const float* w = by.out_norms + i * by.ld;
      for (size_t s = 0; s < n; ++s) dst[s] = std::max(dst[s], p[s] * inv * in_chunk[s] * w[s]);
    }
  }
}

std::vector<float> output_grams(const WeightMatrix& wo, int n_heads, int head_dim) {
  require(n_heads >= 1 && head_dim >= 1 && wo.n_cols == int64_t(n_heads) * head_dim, "attention output columns",
          wo.n_cols, "must be n_heads x head_dim = " + std::to_string(int64_t(n_heads) * head_dim));
  const auto hd = size_t(head_dim);
  std::vector<float> grams(size_t(n_heads) * hd * hd, 0.0f);
  std::vector<float> row(size_t(wo.n_cols));
  for (int64_t r = 0; r < wo.n_rows; ++r) {
    dequantize_weight_row(wo, r, row.data());
    for (size_t h = 0; h < size_t(n_heads); ++h) {
      const float* w = row.data() + h * hd;
      float* g = grams.data() + h * hd * hd;
      for (size_t a = 0; a < hd; ++a) {
        const float wa = w[a];
        float* ga = g + a * hd;
        for (size_t b = 0; b < hd; ++b) ga[b] += wa * w[b];
      }
    }
  }
  return grams;
}

float output_norm(const float* gram, const float* v, int head_dim) {
  const auto hd = size_t(head_dim);
  double sum = 0.0;
  for (size_t a = 0; a < hd; ++a) sum += double(v[a]) * double(dot(gram + a * hd, v, head_dim));
  return float(std::sqrt(std::max(sum, 0.0)));
}

std::vector<int32_t> reconstruction_tokens(const Tokenizer& tokenizer, std::span<const int32_t> context, int64_t first,
                                           int64_t end) {
  std::vector<int32_t> out = tokenizer.encode(first == 0 ? kRepeatFirst : kRepeatLater, false);
  if (first > 0) {
    const int64_t from = std::max<int64_t>(0, first - kRepeatOverlap);
    out.insert(out.end(), context.begin() + from, context.begin() + first);
  }
  const std::vector<int32_t> suffix = tokenizer.encode(kRepeatSuffix, false);
  out.insert(out.end(), suffix.begin(), suffix.end());
  require(out.size() <= size_t(kReconstructionPromptMost), "reconstruction prompt",
          std::to_string(out.size()) + " tokens",
          "exceeds " + std::to_string(kReconstructionPromptMost) + " (the bound admission promises)");
  out.insert(out.end(), context.begin() + first, context.begin() + end);
  return out;
}

void reconstruct_context(Engine& engine, ModelCache& cache, std::span<const int32_t> context, int64_t offset,
                         int64_t first, int64_t end, int chunk, int n_batch) {
  const auto n = int64_t(context.size());
  const int n_sink = cache.config().n_sink;
  require(offset + n > n_sink, "context", std::to_string(offset + n) + " tokens",
          "must be longer than the sinks (n_sink = " + std::to_string(n_sink) + ") for kvzip to score it");
  require(chunk >= 1, "kvzip_chunk", chunk, "must be at least 1");
  require(first >= 0 && first < end && end <= n, "reconstruction range",
          std::to_string(first) + ".." + std::to_string(end),
          "must be a non-empty part of the " + std::to_string(n) + " context tokens");
  std::vector<float> unused;
  for (int64_t a = first; a < end; a += chunk) {
    const int64_t b = std::min(end, a + chunk);
    const std::vector<int32_t> tokens = reconstruction_tokens(engine.model().tokenizer(), context, a, b);
    cache.begin_reconstruction(offset + a, offset + b);
    try {
      PrefillOptions options;
      options.n_batch = n_batch;
      options.reset = false;
      options.as_prompt = false;
      options.logits = Logits::none;
      options.reconstruct = false;
      prefill(engine, cache, tokens, options, unused);
    } catch (...) {
      try {
        cache.end_reconstruction();  // the cache stands where it stood, when the update ended
      } catch (const InvalidArgument&) {
      }
      throw;
    }
    cache.end_reconstruction();
  }
}

}  // namespace squeezekv
