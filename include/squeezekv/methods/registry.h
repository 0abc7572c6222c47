// The registry: every token policy, layer allocator and method id, each described once by the file
// that implements it (its parameters with defaults and ranges, its validation, its factory). The
// command line, the C API, Python, the sweep and `squeezekv methods` walk these lists; no other
// list of names or defaults exists.
//
// Adding a policy: one file in src/policy/ that defines `const PolicyInfo <id>_policy_info`
// (core/component_info.h) and one line in src/policy/registered_policies.h. Allocators likewise in
// src/alloc/.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "squeezekv/core/component_info.h"
#include "squeezekv/core/param_spec.h"
#include "squeezekv/core/storage_info.h"
#include "squeezekv/methods/kv_cache_config.h"

namespace squeezekv {

std::span<const PolicyInfo* const> all_policies();
std::span<const AllocatorInfo* const> all_allocators();
// The reference library's method table (methods.cc), then the methods each policy defines.
std::span<const MethodInfo> all_methods();

// Throw InvalidArgument naming the id and listing the known ones.
const PolicyInfo& find_policy(std::string_view id);
const AllocatorInfo& find_allocator(std::string_view id);
const MethodInfo& find_method(std::string_view id);
const MethodInfo* method_or_null(std::string_view id);  // null when unknown

// The cache's own fields (method, head_dim, budget, n_sink, ...) as parameters.
std::span<const ParamSpec> cache_params();
// Every parameter once: the cache's fields, then each policy's and each allocator's.
const std::vector<const ParamSpec*>& all_params();
// The spec of a parameter by name; null when unknown.
const ParamSpec* find_param(std::string_view name);
// Throws InvalidArgument naming the unknown parameter.
const ParamSpec& require_param(std::string_view name);
// The components that own a parameter ("policy chunked", "allocator pyramid"; "cache" for fields).
std::vector<std::string> param_owners(std::string_view name);

// The policy and allocator a config resolves to (its overrides, else the method's preset).
const PolicyInfo& resolved_policy_info(const KVCacheConfig& config);
const AllocatorInfo& resolved_allocator_info(const KVCacheConfig& config);
std::string resolved_policy(const KVCacheConfig& config);
std::string resolved_allocator(const KVCacheConfig& config);
// The resolved policy's capabilities (PolicyInfo): it keeps every row (no budget, nothing
// evicted); it holds the whole prompt until the prompt ends and chooses then.
bool keeps_every_row(const KVCacheConfig& config);
bool holds_prompt_until_end(const KVCacheConfig& config);
// The reconstruction pass the resolved policy scores by (PolicyInfo::reconstruction), none when
// it scores otherwise.
std::optional<ReconstructionPlan> context_reconstruction(const KVCacheConfig& config);
// The head split a config resolves to: its head_split, else the method's (uniform unless it names one).
HeadSplitRule head_split_rule(const KVCacheConfig& config);
std::string resolved_head_split(const KVCacheConfig& config);
// The resolved allocator's schedule waits for a measurement of the prompt (AllocatorInfo::measures).
bool schedule_waits_for_measurement(const KVCacheConfig& config);

// Whether the config's policy, allocator or storage reads the parameter (fields or component
// parameters).
bool reads_param(const KVCacheConfig& config, std::string_view name);

// What the config's K/V storage is built from (core/storage_info.h): its key and value formats
// (a method's storage preset included) and the storage parameters.
StorageParams storage_params(const KVCacheConfig& config);
// "" when the config's storage gains from its budget (or the cache keeps every row), else the
// storage's message naming the parameter and value: KVCacheConfig::validate refuses such a
// cache, so every command, the server, C and Python do.
std::string storage_budget_unfit(const KVCacheConfig& config);

// PositionRule::span's distance (docs/positions.md) for a cache on a model whose context length is
// context_length: max_distance, or context_length - 1 when it is 0; 0 when the rule does not apply
// (another rule, or the full cache, which always uses text positions).
int64_t span_distance(const KVCacheConfig& config, int64_t context_length);
// The parameters a method reads, in registry order (budget first unless it keeps every row).
std::vector<const ParamSpec*> method_params(const MethodInfo& method);
// The default a method gives a parameter: its override, else the spec's default.
std::string method_default(const MethodInfo& method, const ParamSpec& spec);

// What a component of `config` is built from (core/component_params.h): the cache's fields and
// each parameter of `own` resolved under the config (set, the method's override, or the default).
ComponentParams component_params(const KVCacheConfig& config, std::span<const ParamSpec> own);
std::unique_ptr<TokenPolicy> make_token_policy(const KVCacheConfig& config);
std::unique_ptr<BudgetAllocator> make_allocator(const KVCacheConfig& config);

}  // namespace squeezekv
