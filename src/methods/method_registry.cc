#include "squeezekv/methods/method_registry.h"

#include <array>
#include <string>

#include "squeezekv/core/errors.h"
#include "squeezekv/core/kv_cache_config.h"

namespace squeezekv {
namespace {

constexpr std::array<MethodInfo, 9> kMethods = {{
    {"full", "full", "none", "keep every row (the unevicted baseline)", "none",
     "Reference quality; memory grows with the context"},
    {"h2o", "cumulative", "uniform",
     "heavy hitters: evict the lowest cumulative attention score, uniform budget",
     "budget=512 n_sink=4 recent=0.5 decay=0.98 score=key-proxy",
     "Constant-memory, cumulative-importance eviction, uniform budget"},
    {"squeeze", "cumulative", "squeeze",
     "SqueezeAttention: h2o eviction with per-layer budgets measured from the prompt",
     "budget=512 n_sink=4 strength=1 recent=0.5 decay=0.98 score=key-proxy "
     "importance=key-dispersion squeeze_fraction=0.6",
     "Constant-memory, importance eviction with a data-driven depth-adaptive budget"},
    {"pyramidkv", "cumulative", "pyramid",
     "h2o eviction with a fixed linear taper of budgets over depth",
     "budget=512 n_sink=4 beta=2 recent=0.5 decay=0.98 score=key-proxy",
     "Constant-memory, importance eviction with a fixed depth-adaptive budget"},
    {"chunkkv", "chunked", "uniform",
     "h2o scores, evicting whole chunks of consecutive positions",
     "budget=512 n_sink=4 chunk_size=8 recent=0.5 decay=0.98 score=key-proxy",
     "Importance eviction that keeps contiguous spans (phrases) together"},
    {"tova", "tova", "uniform",
     "evict the row the newest query attends least (one choice per layer)",
     "budget=512 n_sink=4 score=key-proxy",
     "Constant-memory, current-step-importance eviction (reactive)"},
    {"streaming", "streaming", "uniform", "StreamingLLM: attention sinks plus the most recent rows",
     "budget=512 n_sink=4", "Constant-memory, position-based eviction"},
    {"window", "window", "uniform", "sliding window: the most recent rows, no sinks", "budget=512",
     "Simplest constant-memory baseline"},
    {"snapkv", "snapkv", "uniform",
     "score by the last prompt queries once at prefill end; then the oldest rows out past the budget",
     "budget=512 n_sink=4 window=32 kernel=5 score=key-proxy",
     "Hard cap on tokens, evict at prefill only"},
}};

}  // namespace

std::span<const MethodInfo> all_methods() { return kMethods; }

const MethodInfo& find_method(std::string_view id) {
  for (const MethodInfo& method : kMethods) {
    if (method.id == id) return method;
  }
  std::string known;
  for (const MethodInfo& method : kMethods) known += (known.empty() ? "" : ", ") + std::string(method.id);
  throw InvalidArgument(invalid_value("method", std::string(id), "unknown method id (known: " + known + ")"));
}

std::string resolved_policy(const KVCacheConfig& config) {
  return config.policy.empty() ? std::string(find_method(config.method).policy) : config.policy;
}

std::string resolved_allocator(const KVCacheConfig& config) {
  return config.allocator.empty() ? std::string(find_method(config.method).allocator)
                                  : config.allocator;
}

}  // namespace squeezekv
