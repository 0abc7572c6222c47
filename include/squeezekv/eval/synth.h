// The synthetic harness (the seed's benchmark_squeeze.py, reproduced): a mock model whose layer i of
// L mixes Gaussian keys with a constant direction by frac = i / (L - 1), so that deeper layers are
// more concentrated. Every layer is prefilled, then one token per layer is decoded, and the cache's
// measurements, schedule and memory are reported per configuration.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "squeezekv/core/kv_cache_config.h"

namespace squeezekv {

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
  std::vector<int> schedule;           // per-layer budgets after the prompt
  std::vector<int> kept;               // rows held per layer (fullest head) after decoding
  size_t kept_bytes = 0, full_bytes = 0;
  double compression_ratio = 1.0;
  double seconds = 0.0;  // wall time of the cache updates (prefill + decode), data excluded
};

// Runs the grid (layers x seq_len x budget x strength) in that order. `progress` (optional) is
// called after each configuration with (done, total).
std::vector<SynthResult> run_synth(const SynthOptions& options,
                                   const std::function<void(int, int)>& progress = {});

}  // namespace squeezekv
