#include "squeezekv/eval/stream_perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/prefill.h"

namespace squeezekv {
namespace {

struct Sums {
  double nll = 0.0, kept = 0.0, peak = 0.0;
  int64_t scored = 0;
  void add(double token_nll, double kept_bytes) {
    nll += token_nll;
    kept += kept_bytes;
    peak = std::max(peak, kept_bytes);
    ++scored;
  }
};

StreamSegment close_segment(int64_t first, const Sums& s) {
  StreamSegment seg;
  seg.first = first;
  seg.scored = s.scored;
  seg.mean_nll = s.nll / double(s.scored);
  seg.perplexity = std::exp(seg.mean_nll);
  seg.mean_kept_bytes = s.kept / double(s.scored);
  seg.peak_kept_bytes = s.peak;
  return seg;
}

}  // namespace

std::vector<StreamResult> evaluate_stream_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                                     std::span<const KVCacheConfig> configs,
                                                     const StreamOptions& options,
                                                     const std::function<void(int64_t, int64_t)>& progress) {
  require(options.warmup >= 1, "warmup", options.warmup, "must be at least 1");
  require(options.segment >= 1, "segment", options.segment, "must be at least 1");
  require(options.max_tokens >= 0, "max_tokens", options.max_tokens, "must be >= 0 (0 = the whole text)");
  require(!configs.empty(), "configs", 0, "need at least one cache configuration");
  const int64_t n =
      options.max_tokens > 0 ? std::min<int64_t>(options.max_tokens, int64_t(tokens.size())) : int64_t(tokens.size());
  require(n > options.warmup, "text", std::to_string(n) + " tokens",
          "must be longer than the warm-up of " + std::to_string(options.warmup) + " tokens");
  const int vocab = engine.model().config().vocab;
  const int64_t per_config = n - options.warmup;
  std::vector<StreamResult> results;
  std::vector<float> logits;
  for (size_t c = 0; c < configs.size(); ++c) {
    const auto start = std::chrono::steady_clock::now();
    auto cache = engine.make_cache(configs[c]);
    PrefillOptions prefill_options;
    prefill_options.n_batch = options.n_batch;
    prefill_options.max_rows = 0;  // a stream: no end known
    prefill(engine, *cache, tokens.first(size_t(options.warmup)), prefill_options, logits);
    StreamResult r;
    r.config = configs[c];
    r.tokens = n;
    Sums all, seg;
    double sliding = 0.0;
    int64_t seg_first = options.warmup;
    // logits predict tokens[j]; then tokens[j] goes in and the next prediction comes out.
    for (int64_t j = options.warmup; j < n; ++j) {
      const double nll = logsumexp(logits.data(), vocab) - double(logits[size_t(tokens[size_t(j)])]);
      const double kept = double(cache->kept_bytes());
      all.add(nll, kept);
      seg.add(nll, kept);
      sliding += double(cache->sliding_kept_bytes());
      if (seg.scored == options.segment || j + 1 == n) {
        r.segments.push_back(close_segment(seg_first, seg));
        seg = Sums{};
        seg_first = j + 1;
      }
      if (j + 1 < n) engine.forward(tokens.subspan(size_t(j), 1), *cache, Logits::last, logits);
      if (progress && (j - options.warmup + 1) % 4096 == 0) {
        progress(int64_t(c) * per_config + (j - options.warmup + 1), int64_t(configs.size()) * per_config);
      }
    }
    r.scored = all.scored;
    r.mean_nll = all.nll / double(all.scored);
    r.perplexity = std::exp(r.mean_nll);
    r.mean_kept_bytes = all.kept / double(all.scored);
    r.peak_kept_bytes = all.peak;
    r.mean_sliding_kept_bytes = sliding / double(all.scored);
    r.mean_evicting_kept_bytes = (all.kept - sliding) / double(all.scored);
    r.layer_windows = sliding_windows_of(cache->layer_kinds());
    r.layer_budgets = cache->budgets();
    r.layer_schedule = cache->scheduled_budgets();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    results.push_back(std::move(r));
  }
  if (progress) progress(int64_t(configs.size()) * per_config, int64_t(configs.size()) * per_config);
  return results;
}

}  // namespace squeezekv
