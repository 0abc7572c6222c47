// Perplexity with any cache configuration, on llama-perplexity's chunks and scored positions:
// each chunk of n_ctx tokens starts with BOS on a cleared cache; its first n_ctx/2 tokens go in as
// the prompt (prefill updates of n_batch tokens), then every later token is decoded one at a time
// against the (evicting) cache; the logits at positions n_ctx/2 .. n_ctx-2 are scored against the
// next token. With the full cache this reproduces llama-perplexity's figures.
//
// Every configuration is also compared with the full cache on the same positions, computed once
// per chunk and shared: KL divergence of each next-token distribution and top-1 agreement.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "squeezekv/engine/engine.h"

namespace squeezekv {

struct PerplexityOptions {
  int n_ctx = 512;
  int n_batch = 512;   // prompt tokens per prefill update
  int max_chunks = 0;  // 0 = every whole chunk of the text
};

struct PerplexityResult {
  KVCacheConfig config;
  int chunks = 0;
  int64_t scored = 0;
  double mean_nll = 0.0;
  double perplexity = 0.0;
  double mean_kl = 0.0;         // KL(full || this), nats per scored token
  double top1_agreement = 1.0;  // share of scored positions whose argmax equals full's
  // Resident K/V bytes after each decode step (mean) and after any update (peak), next to what
  // an unevicted cache holds at the same moments.
  double mean_kept_bytes = 0.0, peak_kept_bytes = 0.0;
  double mean_full_bytes = 0.0, peak_full_bytes = 0.0;
  // The kept bytes split: the sliding layers' windows and the layers the method evicts in.
  double mean_sliding_kept_bytes = 0.0, peak_sliding_kept_bytes = 0.0;
  double mean_evicting_kept_bytes = 0.0, peak_evicting_kept_bytes = 0.0;
  std::vector<int> layer_windows;       // per layer: 0 global (evicting), W sliding
  std::vector<int> layer_budgets;       // per layer, at the end of the last chunk (sliding: W), conserved
  std::vector<int> layer_schedule;      // what the allocator scheduled (layer_budgets before conservation)
  std::vector<double> layer_mean_kept;  // rows per layer and head (rows_per_head), mean over decode steps
  // What a measuring allocator read per layer in the last chunk: the key concentration
  // (key-dispersion) or the hidden-state cosine (hidden-cosine); empty for fixed schedules.
  std::vector<double> layer_importance;
  double seconds = 0.0;
};

// Tokens of a text file the way llama-perplexity reads it: one trailing '\n' dropped, BOS first.
std::vector<int32_t> tokenize_text_file(const Tokenizer& tokenizer, const std::string& path);

// `progress(done, total)` counts decoded chunk passes (the shared full pass included).
std::vector<PerplexityResult> evaluate_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                                  std::span<const KVCacheConfig> configs,
                                                  const PerplexityOptions& options,
                                                  const std::function<void(int, int)>& progress = {});

}  // namespace squeezekv
