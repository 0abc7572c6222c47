// The method ids of the reference library's table (and ours) as presets of (token policy, layer
// allocator, parameter overrides).
#include <array>
#include <vector>

#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

constexpr std::array<MethodInfo, 11> kMethods = {{
    {"full", "full", "none", "keep every row (the unevicted baseline)",
     "Reference quality; memory grows with the context"},
    {"h2o", "cumulative", "uniform", "heavy hitters: evict the lowest cumulative attention score, uniform budget",
     "Constant-memory, cumulative-importance eviction, uniform budget"},
    {"squeeze", "cumulative", "squeeze",
     "SqueezeAttention: h2o eviction with per-layer budgets measured from the prompt",
     "Constant-memory, importance eviction with a data-driven depth-adaptive budget"},
    {"pyramidkv", "cumulative", "pyramid", "h2o eviction with a fixed linear taper of budgets over depth",
     "Constant-memory, importance eviction with a fixed depth-adaptive budget"},
    {"chunkkv", "chunked", "uniform", "h2o scores, evicting whole chunks of consecutive positions",
     "Importance eviction that keeps contiguous spans (phrases) together"},
    {"tova", "tova", "uniform", "evict the row the newest query attends least (one choice per layer)",
     "Constant-memory, current-step-importance eviction (reactive)"},
    {"streaming", "streaming", "uniform", "StreamingLLM: attention sinks plus the most recent rows",
     "Constant-memory, position-based eviction"},
    {"window", "window", "uniform", "sliding window: the most recent rows, no sinks",
     "Simplest constant-memory baseline"},
    {"snapkv", "snapkv", "uniform",
     "score by the last prompt queries once at prefill end; then the oldest rows out past the budget",
     "Hard cap on tokens, evict at prefill only"},
    {"kivi",
     "full",
     "none",
     "KIVI: every row kept, in 2-bit codes (keys per channel, values per token), the newest in fp16",
     "Compress all tokens uniformly: KIVI-2bit",
     {},
     "kivi2"},
    {"kivi_sink",
     "full",
     "none",
     "KIVI with the first n_sink positions kept in fp16",
     "Compress all tokens uniformly, the attention sinks exact",
     {},
     "kivi2",
     true},
}};

}  // namespace

std::span<const MethodInfo> all_methods() {
  // Built once (thread-safe static initialisation); the policies' own methods follow the table.
  static const std::vector<MethodInfo> methods = [] {
    std::vector<MethodInfo> out(kMethods.begin(), kMethods.end());
    for (const PolicyInfo* p : all_policies()) out.insert(out.end(), p->methods.begin(), p->methods.end());
    return out;
  }();
  return methods;
}

}  // namespace squeezekv
