// The method ids of the seed's table as presets of (token policy, layer allocator). The registry
// lives outside the core: the core knows policies and allocators, not method names.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace squeezekv {

struct MethodInfo {
  std::string_view id;
  std::string_view policy;
  std::string_view allocator;
  std::string_view summary;      // one line
  std::string_view parameters;   // the parameters it reads, with defaults
  std::string_view when_to_use;  // the seed's "when to use it" line
};

std::span<const MethodInfo> all_methods();
// Throws InvalidArgument naming the id and listing the known ones.
const MethodInfo& find_method(std::string_view id);

struct KVCacheConfig;
// The policy and allocator a config resolves to (its overrides, else the method's preset).
std::string resolved_policy(const KVCacheConfig& config);
std::string resolved_allocator(const KVCacheConfig& config);

}  // namespace squeezekv
