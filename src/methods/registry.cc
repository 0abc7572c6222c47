// The registry's lists and look-ups. The policies and allocators describe themselves in their own
// files; the lists below are built from one line each in registered_policies.h and
// registered_allocators.h.
#include "squeezekv/methods/registry.h"

#include <algorithm>
#include <string>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

#define SQUEEZEKV_POLICY(id) extern const PolicyInfo id##_policy_info;
#include "policy/registered_policies.h"
#undef SQUEEZEKV_POLICY
#define SQUEEZEKV_ALLOCATOR(id) extern const AllocatorInfo id##_allocator_info;
#include "alloc/registered_allocators.h"
#undef SQUEEZEKV_ALLOCATOR

namespace {

const PolicyInfo* const kPolicies[] = {
#define SQUEEZEKV_POLICY(id) &id##_policy_info,
#include "policy/registered_policies.h"
#undef SQUEEZEKV_POLICY
};

const AllocatorInfo* const kAllocators[] = {
#define SQUEEZEKV_ALLOCATOR(id) &id##_allocator_info,
#include "alloc/registered_allocators.h"
#undef SQUEEZEKV_ALLOCATOR
};

template <typename Range>
std::string ids(const Range& range) {
  std::string out;
  for (const auto& item : range) {
    if (!out.empty()) out += ", ";
    if constexpr (std::is_pointer_v<std::decay_t<decltype(item)>>) out += item->id;
    else out += item.id;
  }
  return out;
}

bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool owns(std::span<const ParamSpec> params, std::string_view name) {
  return std::any_of(params.begin(), params.end(), [&](const ParamSpec& p) { return p.name == name; });
}

}  // namespace

std::span<const PolicyInfo* const> all_policies() { return kPolicies; }
std::span<const AllocatorInfo* const> all_allocators() { return kAllocators; }

const PolicyInfo& find_policy(std::string_view id) {
  for (const PolicyInfo* p : kPolicies) {
    if (p->id == id) return *p;
  }
  throw InvalidArgument(invalid_value("policy", std::string(id), "unknown token policy (" + ids(kPolicies) + ")"));
}

const AllocatorInfo& find_allocator(std::string_view id) {
  for (const AllocatorInfo* a : kAllocators) {
    if (a->id == id) return *a;
  }
  throw InvalidArgument(
      invalid_value("allocator", std::string(id), "unknown layer allocator (" + ids(kAllocators) + ")"));
}

const MethodInfo* method_or_null(std::string_view id) {
  for (const MethodInfo& method : all_methods()) {
    if (method.id == id) return &method;
  }
  return nullptr;
}

const MethodInfo& find_method(std::string_view id) {
  for (const MethodInfo& method : all_methods()) {
    if (method.id == id) return method;
  }
  throw InvalidArgument(
      invalid_value("method", std::string(id), "unknown method id (known: " + ids(all_methods()) + ")"));
}

const std::vector<const ParamSpec*>& all_params() {
  // Built once (thread-safe static): the cache's fields, then each policy's and allocator's own.
  static const std::vector<const ParamSpec*> params = [] {
    std::vector<const ParamSpec*> out;
    auto add = [&](std::span<const ParamSpec> specs) {
      for (const ParamSpec& spec : specs) {
        const bool seen = std::any_of(out.begin(), out.end(), [&](const ParamSpec* p) { return p->name == spec.name; });
        if (!seen) out.push_back(&spec);
      }
    };
    add(cache_params());
    for (const PolicyInfo* p : kPolicies) add(p->params);
    for (const AllocatorInfo* a : kAllocators) add(a->params);
    return out;
  }();
  return params;
}

const ParamSpec* find_param(std::string_view name) {
  for (const ParamSpec* spec : all_params()) {
    if (spec->name == name) return spec;
  }
  return nullptr;
}

const ParamSpec& require_param(std::string_view name) {
  if (const ParamSpec* spec = find_param(name)) return *spec;
  std::string known;
  for (const ParamSpec* spec : all_params()) known += (known.empty() ? "" : ", ") + std::string(spec->name);
  throw InvalidArgument(invalid_value("parameter", std::string(name), "unknown parameter (known: " + known + ")"));
}

std::vector<std::string> param_owners(std::string_view name) {
  std::vector<std::string> out;
  // A cache field a storage owns is that storage's (kivi_group: storage kivi).
  if (const StorageInfo* s = storage_owning(name)) out.push_back("storage " + std::string(s->id));
  else if (owns(cache_params(), name)) out.emplace_back("cache");
  for (const PolicyInfo* p : kPolicies) {
    if (owns(p->params, name)) out.push_back("policy " + std::string(p->id));
  }
  for (const AllocatorInfo* a : kAllocators) {
    if (owns(a->params, name)) out.push_back("allocator " + std::string(a->id));
  }
  return out;
}

const PolicyInfo& resolved_policy_info(const KVCacheConfig& config) {
  return find_policy(config.policy.empty() ? find_method(config.method).policy : config.policy);
}

const AllocatorInfo& resolved_allocator_info(const KVCacheConfig& config) {
  return find_allocator(config.allocator.empty() ? find_method(config.method).allocator : config.allocator);
}

std::string resolved_policy(const KVCacheConfig& config) { return std::string(resolved_policy_info(config).id); }
bool keeps_every_row(const KVCacheConfig& config) { return resolved_policy_info(config).keeps_every_row; }
bool holds_prompt_until_end(const KVCacheConfig& config) { return resolved_policy_info(config).holds_prompt_until_end; }
std::optional<ReconstructionPlan> context_reconstruction(const KVCacheConfig& config) {
  const PolicyInfo& p = resolved_policy_info(config);
  if (p.reconstruction == nullptr) return std::nullopt;
  return p.reconstruction(component_params(config, p.params));
}
bool schedule_waits_for_measurement(const KVCacheConfig& config) {
  return !resolved_allocator_info(config).measures.empty();
}
std::string resolved_allocator(const KVCacheConfig& config) { return std::string(resolved_allocator_info(config).id); }

namespace {

HeadSplitRule parse_head_split(std::string_view text) {
  if (text == "adakv") return HeadSplitRule::adakv;
  if (text.empty() || text == "uniform") return HeadSplitRule::uniform;
  throw InvalidArgument(invalid_value("head_split", std::string(text), "expected auto, uniform or adakv"));
}

}  // namespace

HeadSplitRule head_split_rule(const KVCacheConfig& config) {
  if (config.head_split != "auto") return parse_head_split(config.head_split);
  return parse_head_split(find_method(config.method).head_split);
}

std::string resolved_head_split(const KVCacheConfig& config) { return to_string(head_split_rule(config)); }

namespace {

bool component_reads(const PolicyInfo& p, const AllocatorInfo& a, std::string_view name) {
  // The engine applies the position rule to every cache that evicts; the full cache never shifts.
  if (name == "positions" || name == "max_distance") return !p.keeps_every_row;
  // Any policy that scores its rows can have them split among its heads; the floor matters only
  // under the adakv split (reads_param, method_params).
  if (name == "head_split") return p.splits_heads;
  if (name == "head_floor") return false;
  return owns(p.params, name) || owns(a.params, name) || contains(p.reads, name) || contains(a.reads, name) ||
         (name == "score" && p.scores_rows);
}

}  // namespace

int64_t span_distance(const KVCacheConfig& config, int64_t context_length) {
  if (config.positions != PositionRule::span || keeps_every_row(config)) return 0;
  if (config.max_distance > 0) return config.max_distance;
  return std::max<int64_t>(context_length - 1, 0);
}

bool reads_param(const KVCacheConfig& config, std::string_view name) {
  // Every cache stores rows in its formats, whichever policy and allocator it runs.
  if (name == "kv_type" || name == "k_type" || name == "v_type") return true;
  // A storage reads its own parameters when it holds keys or values, and n_sink when it keeps the
  // sinks in fp16 (KIVI's kivi_fp16_sinks).
  const StorageParams storage = storage_params(config);
  if (const StorageInfo* owner = storage_owning(name)) return storage_in_use(*owner, storage);
  if (name == "n_sink" && storage.fp16_below > 0) return true;
  const AllocatorInfo& a = resolved_allocator_info(config);
  if (a.uses && owns(a.params, name) && !a.uses(component_params(config, a.params), name)) return false;
  if (name == "max_distance" && config.positions != PositionRule::span) return false;
  if (name == "head_floor") return head_split_rule(config) == HeadSplitRule::adakv;
  return component_reads(resolved_policy_info(config), a, name);
}

std::vector<const ParamSpec*> method_params(const MethodInfo& method) {
  const PolicyInfo& p = find_policy(method.policy);
  const AllocatorInfo& a = find_allocator(method.allocator);
  std::vector<const ParamSpec*> out;
  for (const ParamSpec* spec : all_params()) {
    // A method with a storage preset reads that storage's parameters (and n_sink, if it pins the sinks).
    const StorageInfo* owner = storage_owning(spec->name);
    const bool storage =
        !method.kv_type.empty() && ((owner != nullptr && owner->stores(parse_kv_type(std::string(method.kv_type)))) ||
                                    (method.fp16_sinks && spec->name == "n_sink"));
    const bool floor = spec->name == "head_floor" && parse_head_split(method.head_split) == HeadSplitRule::adakv;
    if (component_reads(p, a, spec->name) || storage || floor) out.push_back(spec);
  }
  return out;
}

std::string method_default(const MethodInfo& method, const ParamSpec& spec) {
  for (const ParamOverride& o : method.overrides) {
    if (o.name == spec.name) return std::string(o.value);
  }
  if (spec.name == "kv_type" && !method.kv_type.empty()) return std::string(method.kv_type);
  return std::string(spec.default_value);
}

ComponentParams component_params(const KVCacheConfig& config, std::span<const ParamSpec> own) {
  ComponentParams out{config.budget, config.n_sink, config.head_dim, config.recent, config.decay, config.score};
  for (const ParamSpec& spec : own) out.own.emplace(std::string(spec.name), config.get(spec.name));
  return out;
}

std::unique_ptr<TokenPolicy> make_token_policy(const KVCacheConfig& config) {
  const PolicyInfo& info = resolved_policy_info(config);
  return info.make(component_params(config, info.params));
}

std::unique_ptr<BudgetAllocator> make_allocator(const KVCacheConfig& config) {
  const AllocatorInfo& info = resolved_allocator_info(config);
  return info.make(component_params(config, info.params));
}

StorageParams storage_params(const KVCacheConfig& config) {
  return {config.key_type(), config.value_type(),  config.head_dim,
          config.kivi_group, config.kivi_residual, config.kivi_sinks()};
}

std::string storage_budget_unfit(const KVCacheConfig& config) {
  if (keeps_every_row(config)) return "";
  return storage_budget_unfit(storage_params(config), config.budget);
}

}  // namespace squeezekv
