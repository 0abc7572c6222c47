// The synthetic harness (the reference library's benchmark_squeeze.py, reproduced): a mock model whose layer i of
// L mixes Gaussian keys with a constant direction by frac = i / (L - 1), so that deeper layers are
// more concentrated. Every layer is prefilled, then one token per layer is decoded, and the cache's
// measurements, schedule and memory are reported per configuration.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "squeezekv/methods/kv_cache_config.h"

namespace squeezekv {

// Standard normal samples, Box-Muller over a fixed 64-bit generator: identical on every platform
// for the same seed (the harness's keys and values, and the tests' random data).
std::vector<float> gaussian_samples(size_t n, uint64_t seed, float scale = 1.0f);

// The mock model's key of layer `layer` of `n_layers` from a standard normal sample: the sample
// mixed with a constant direction by frac = layer / (n_layers - 1).
inline float mock_key(float gaussian, int layer, int n_layers) {
  const float frac = n_layers > 1 ? float(layer) / float(n_layers - 1) : 0.0f;
  return (1.0f - frac) * gaussian + 3.0f * frac;
}

// Bounds of the synthetic sweep, checked before anything is allocated or a thread started.
inline constexpr int kMaxSynthThreads = 256;
inline constexpr int kMaxSynthTokens = 1 << 20;
inline constexpr int64_t kMaxSynthLayerFloats = int64_t(1) << 28;  // 1 GiB of keys per layer

struct SynthOptions {
  std::vector<int> layers = {12, 32};
  std::vector<int> seq_lens = {256, 512};
  std::vector<int> budgets = {64, 128};
  std::vector<double> strengths = {0.0, 0.5, 1.0};  // only the squeeze allocator reads them
  KVCacheConfig base;  // method, n_sink, head_dim, ... (budget and strength come from the grid)
  int kv_heads = 8;
  int decode_tokens = 1;
  uint64_t seed = 0;
  int threads = 1;  // configurations run in parallel
};

struct SynthResult {
  std::string method;
  int n_layers = 0, seq_len = 0, budget = 0;
  double strength = 0.0;
  std::vector<double> concentrations;  // per layer, measured from the prompt
  std::vector<int> schedule;           // per-layer budgets the allocator scheduled after the prompt
  std::vector<int> held_budgets;       // after the prompt: the schedule conserved to what each layer can hold
  std::vector<int> kept;               // rows held per layer (per head, rounded up) after decoding
  // Rows: the schedule's total, what the layers held after the prompt, and what they could have
  // held of the promise but did not (min(scheduled, layers x tokens) - held; 0 when conserved).
  int64_t scheduled_rows = 0, held_rows = 0, wasted_rows = 0;
  size_t kept_bytes = 0, full_bytes = 0;
  double compression_ratio = 1.0;
  double seconds = 0.0;  // wall time of the cache updates (prefill + decode), data excluded
};

// Runs the grid (layers x seq_len x budget x strength) in that order. `progress` (optional) is
// called after each configuration with (done, total).
std::vector<SynthResult> run_synth(const SynthOptions& options, const std::function<void(int, int)>& progress = {});

}  // namespace squeezekv
