#include "squeezekv/eval/sweep.h"

#include <algorithm>
#include <functional>
#include <set>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

// Expands the axes from index `i` on into `out`, each applied where `c` reads its parameter.
void expand_axes(const SweepSpec& spec, size_t i, KVCacheConfig& c,
                 const std::function<void(const KVCacheConfig&)>& add) {
  if (i == spec.axes.size()) {
    add(c);
    return;
  }
  const SweepAxis& axis = spec.axes[i];
  if (axis.values.empty() || !reads_param(c, axis.param)) {
    expand_axes(spec, i + 1, c, add);
    return;
  }
  const ParamValue saved = c.get(axis.param);
  for (const std::string& value : axis.values) {
    c.set(axis.param, value);
    expand_axes(spec, i + 1, c, add);
  }
  c.set(axis.param, saved);
}

}  // namespace

std::vector<KVCacheConfig> expand_sweep(const SweepSpec& spec) {
  // "all" alone (the command line's default, as its help shows it) is every method, as empty is.
  const bool whole_table = spec.methods.empty() || spec.methods == std::vector<std::string>{"all"};
  std::vector<std::string> methods = whole_table ? std::vector<std::string>{} : spec.methods;
  if (methods.empty()) {
    for (const MethodInfo& m : all_methods()) methods.emplace_back(m.id);
  }
  require(!spec.budgets.empty(), "budgets", "(none)", "a sweep needs at least one budget");
  for (const SweepAxis& axis : spec.axes) {
    const ParamSpec& p = require_param(axis.param);
    require(p.kind != ParamKind::text && p.name != "budget" && p.name != "head_dim", "axis", axis.param,
            "cannot be swept (methods and budgets have their own lists)");
    for (const std::string& value : axis.values) p.check(p.parse(value));
  }
  std::vector<KVCacheConfig> out;
  std::set<std::string> seen;
  auto add = [&](const KVCacheConfig& given) {
    KVCacheConfig c = given;
    // A method with a storage preset (kivi: kivi2) spells it out, so that it and the same format
    // given by --kv-types are one variant; the whole-table default leaves such a method out of
    // the formats it does not take.
    bool preset = false;
    if (const MethodInfo& m = find_method(c.method); !m.kv_type.empty()) {
      preset = c.kv_type == KVType::f16;
      if (preset) c.kv_type = parse_kv_type(std::string(m.kv_type));
      if (whole_table && !kv_kivi(c.kv_type)) return;
    }
    // The whole table also leaves a KIVI method's own preset out where it would compress nothing
    // (storage_budget_unfit: the small default budgets); KIVI asked for by name is refused, by validate.
    if (whole_table && preset && !storage_budget_unfit(c).empty()) return;
    c.validate();
    std::string key = sweep_variant(c);
    key += keeps_every_row(c) ? std::string(" b=-") : " b=" + std::to_string(c.budget);
    if (seen.insert(key).second) out.push_back(c);
  };
  const int64_t base_window = spec.base.get_int("window");
  for (const std::string& method : methods) {
    KVCacheConfig c = spec.base;
    c.method = method;
    c.policy.clear();
    c.allocator.clear();
    find_method(method);
    // A policy that chooses once from an observation window (snapkv) must leave that window room in
    // small budgets: at most half.
    const bool observes = holds_prompt_until_end(c) && reads_param(c, "window");
    for (int budget : spec.budgets) {
      c.budget = budget;
      if (observes) c.set("window", std::max<int64_t>(1, std::min<int64_t>(base_window, budget / 2)));
      expand_axes(spec, 0, c, add);
    }
  }
  return out;
}

std::string sweep_variant(const KVCacheConfig& c) {
  const PolicyInfo& policy = resolved_policy_info(c);
  const AllocatorInfo& allocator = resolved_allocator_info(c);
  // Appended piece by piece: chained operator+ on strings trips a false -Wrestrict in g++ 12.
  std::string label = c.method;
  auto add = [&label](std::string_view piece) {
    label += ' ';
    label += piece;
  };
  if (!c.policy.empty() || !c.allocator.empty()) {
    add("policy=");
    label += policy.id;
    label += " allocator=";
    label += allocator.id;
  }
  // The allocator's parameters, the policy's, then the cache fields the method reads.
  auto add_param = [&](const ParamSpec& spec) {
    if (spec.label.empty() || !reads_param(c, spec.name)) return;
    const std::string value = c.get_text(spec.name);
    if (!spec.omit_if.empty() && value == spec.omit_if) return;
    if (spec.kind == ParamKind::choice && spec.label == spec.name) {
      add(value);
    } else {
      add(spec.label);
      label += '=';
      label += value;
    }
  };
  for (const ParamSpec& spec : allocator.params) add_param(spec);
  for (const ParamSpec& spec : policy.params) add_param(spec);
  for (const ParamSpec& spec : cache_params()) add_param(spec);
  return label;
}

}  // namespace squeezekv
