#include "squeezekv/eval/sweep.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>

#include "squeezekv/core/errors.h"
#include "squeezekv/methods/method_registry.h"

namespace squeezekv {
namespace {

bool scores_rows(const std::string& policy) {
  return policy == "cumulative" || policy == "chunked" || policy == "tova" || policy == "snapkv";
}

bool cumulative(const std::string& policy) { return policy == "cumulative" || policy == "chunked"; }

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

std::vector<KVCacheConfig> expand_sweep(const SweepSpec& spec) {
  require(!spec.methods.empty(), "methods", "(none)", "a sweep needs at least one method");
  require(!spec.budgets.empty(), "budgets", "(none)", "a sweep needs at least one budget");
  std::vector<KVCacheConfig> out;
  std::set<std::string> seen;
  auto add = [&](const KVCacheConfig& c) {
    c.validate();
    std::string key = sweep_variant(c);
    key += resolved_policy(c) == "full" ? std::string(" b=-") : " b=" + std::to_string(c.budget);
    if (seen.insert(key).second) out.push_back(c);
  };
  for (const std::string& method : spec.methods) {
    KVCacheConfig c = spec.base;
    c.method = method;
    c.policy.clear();
    c.allocator.clear();
    find_method(method);
    const std::string policy = resolved_policy(c), allocator = resolved_allocator(c);
    // An axis applies where the method reads it and was given; elsewhere the base's value.
    auto axis = [](bool reads, const auto& values, auto base) {
      return reads && !values.empty() ? values : std::vector<decltype(base)>{base};
    };
    const auto scores = axis(scores_rows(policy), spec.scores, spec.base.score);
    const auto strengths = axis(allocator == "squeeze", spec.strengths, spec.base.strength);
    const auto importances = axis(allocator == "squeeze", spec.importances, spec.base.importance);
    const auto recents = axis(cumulative(policy), spec.recents, spec.base.recent);
    const auto decays = axis(cumulative(policy), spec.decays, spec.base.decay);
    for (int budget : spec.budgets) {
      for (ScoreSource score : scores) {
        for (Importance importance : importances) {
          const auto fractions = axis(allocator == "squeeze" && importance == Importance::hidden_cosine,
                                      spec.fractions, spec.base.squeeze_fraction);
          for (double strength : strengths) {
            for (double fraction : fractions) {
              for (double recent : recents) {
                for (double decay : decays) {
                  c.budget = budget;
                  c.score = score;
                  c.importance = importance;
                  c.strength = strength;
                  c.squeeze_fraction = fraction;
                  c.recent = recent;
                  c.decay = decay;
                  // The observation window must leave room in small budgets: at most half.
                  if (policy == "snapkv") c.window = std::max(1, std::min(spec.base.window, budget / 2));
                  add(c);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string sweep_variant(const KVCacheConfig& c) {
  const std::string policy = resolved_policy(c), allocator = resolved_allocator(c);
  // Appended piece by piece: chained operator+ on strings trips a false -Wrestrict in g++ 12.
  std::string label = c.method;
  auto add = [&label](const std::string& piece) {
    label += ' ';
    label += piece;
  };
  if (!c.policy.empty() || !c.allocator.empty()) add("policy=" + policy + " allocator=" + allocator);
  if (allocator == "squeeze") {
    add(to_string(c.importance));
    if (c.importance == Importance::hidden_cosine) add("p=" + number(c.squeeze_fraction));
    add("s=" + number(c.strength));
  }
  if (allocator == "pyramid") add("beta=" + number(c.beta));
  if (policy == "chunked") add("chunk=" + std::to_string(c.chunk_size));
  if (scores_rows(policy)) add(to_string(c.score));
  if (cumulative(policy)) {
    add("recent=" + number(c.recent));
    if (c.decay != 1.0) add("decay=" + number(c.decay));
  }
  if (policy != "full" && policy != "window") add("sinks=" + std::to_string(c.n_sink));
  if (policy != "full" && c.positions == PositionRule::text) add("text-pos");
  return label;
}

}  // namespace squeezekv
