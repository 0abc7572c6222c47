#include "squeezekv/methods/cache_parts.h"

#include "squeezekv/methods/registry.h"

namespace squeezekv {

CacheParts resolve_cache_parts(const KVCacheConfig& config) {
  config.validate();
  CacheParts parts;
  const PolicyInfo& policy = resolved_policy_info(config);
  const AllocatorInfo& allocator = resolved_allocator_info(config);
  parts.make_policy = [&policy, params = component_params(config, policy.params)] { return policy.make(params); };
  parts.allocator = allocator.make(component_params(config, allocator.params));
  parts.keeps_every_row = policy.keeps_every_row;
  parts.ranks_globally = allocator.ranks_globally;
  parts.storage = storage_params(config);
  parts.head_split = head_split_rule(config);
  return parts;
}

}  // namespace squeezekv
