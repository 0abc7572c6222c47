// The parts a cache is built from, each resolved once from a KVCacheConfig (its method's presets,
// its overrides, its storage): ModelCache and LayerCache are built from these and never look a
// method, policy or allocator up by name, so the budget's walk from the command line to an
// eviction goes down the layers (methods -> cache) and never back.
#pragma once

#include <functional>
#include <memory>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/core/cache_choices.h"
#include "squeezekv/core/storage_info.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

struct CacheParts {
  std::function<std::unique_ptr<TokenPolicy>()> make_policy;  // a fresh policy for each evicting layer
  std::shared_ptr<const BudgetAllocator> allocator;           // schedules the evicting layers
  bool keeps_every_row = false;                               // the policy never evicts: a lone layer takes no budget
  bool ranks_globally = false;  // the allocator ranks every layer's rows together (global)
  StorageParams storage;        // key and value formats, KIVI's layout, head_dim
  HeadSplitRule head_split = HeadSplitRule::uniform;
};

// Validates the config (KVCacheConfig::validate), then resolves its parts.
CacheParts resolve_cache_parts(const KVCacheConfig& config);

}  // namespace squeezekv
