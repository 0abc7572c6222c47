// BudgetAllocator: how many rows each layer gets — the other axis of every eviction method
// (semantics.md section 1), independent of the token policy inside a layer.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "squeezekv/core/kv_cache_config.h"

namespace squeezekv {

class BudgetAllocator {
 public:
  virtual ~BudgetAllocator() = default;
  virtual std::string_view name() const = 0;
  // What must be measured per layer during the prompt; nullopt for a schedule fixed at build time.
  virtual std::optional<Importance> measures() const { return std::nullopt; }
  // Per-layer budgets; `measurements` has one value per layer when measures() is set, else empty.
  // max_rows > 0 is the longest sequence the cache will see (a budget beyond it is wasted);
  // allocators that redistribute may use it, the fixed ones ignore it.
  virtual std::vector<int> allocate(int n_layers, std::span<const double> measurements,
                                    int max_rows) const = 0;
};

// A budget no eviction ever reaches (the `none` allocator, used by `full`).
inline constexpr int kUnbounded = 1 << 30;

// Allocator names: none, uniform, pyramid, squeeze.
std::unique_ptr<BudgetAllocator> make_allocator(std::string_view name, const KVCacheConfig& config);
bool is_allocator(std::string_view name);

}  // namespace squeezekv
