#include "squeezekv/core/kv_cache_config.h"

#include <cmath>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/core/errors.h"
#include "squeezekv/methods/method_registry.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

void KVCacheConfig::validate() const {
  find_method(method);  // throws for an unknown id
  const std::string policy_name = resolved_policy(*this);
  const std::string allocator_name = resolved_allocator(*this);
  require(is_token_policy(policy_name), "policy", policy_name,
          "unknown token policy (full, cumulative, chunked, tova, streaming, window, snapkv)");
  require(is_allocator(allocator_name), "allocator", allocator_name,
          "unknown layer allocator (none, uniform, pyramid, squeeze)");
  require((policy_name == "full") == (allocator_name == "none"), "allocator", allocator_name,
          "the full policy keeps every row and takes allocator none; every other policy needs a "
          "budget allocator (uniform, pyramid, squeeze)");
  require(head_dim >= 1, "head_dim", head_dim, "must be at least 1");
  require(n_sink >= 0, "n_sink", n_sink, "must be at least 0");
  if (policy_name != "full") {
    require(budget > n_sink, "budget", budget,
            "must exceed n_sink = " + std::to_string(n_sink) + " (the floor is n_sink + 1)");
  }
  if (resolved_budget) {
    require(*resolved_budget > n_sink, "resolved_budget", *resolved_budget,
            "must exceed n_sink = " + std::to_string(n_sink));
  }
  require(strength >= 0.0 && strength <= 1.0, "strength", strength, "must lie in [0, 1]");
  require(recent >= 0.0 && recent <= 1.0, "recent", recent, "must lie in [0, 1]");
  require(decay > 0.0 && decay <= 1.0, "decay", decay, "must lie in (0, 1]");
  require(beta >= 1.0 && std::isfinite(beta), "beta", beta, "must be at least 1 (1 = uniform)");
  require(chunk_size >= 1, "chunk_size", chunk_size, "must be at least 1 (1 = h2o)");
  require(kernel >= 1 && kernel % 2 == 1, "kernel", kernel, "must be an odd number >= 1");
  require(window >= 1, "window", window, "must be at least 1");
  if (policy_name == "snapkv") {
    require(window < budget, "window", window,
            "must be smaller than budget = " + std::to_string(budget));
  }
  require(squeeze_fraction > 0.0 && squeeze_fraction <= 1.0, "squeeze_fraction", squeeze_fraction,
          "must lie in (0, 1]");
}

std::string to_string(ScoreSource source) {
  return source == ScoreSource::key_proxy ? "key-proxy" : "attention";
}

std::string to_string(Importance importance) {
  return importance == Importance::key_dispersion ? "key-dispersion" : "hidden-cosine";
}

std::string to_string(KVType type) { return type == KVType::f16 ? "f16" : "f32"; }

std::string to_string(PositionRule rule) { return rule == PositionRule::cache ? "cache" : "text"; }

ScoreSource parse_score_source(const std::string& text) {
  if (text == "key-proxy") return ScoreSource::key_proxy;
  if (text == "attention") return ScoreSource::attention;
  throw InvalidArgument(invalid_value("score", text, "expected key-proxy or attention"));
}

Importance parse_importance(const std::string& text) {
  if (text == "key-dispersion") return Importance::key_dispersion;
  if (text == "hidden-cosine") return Importance::hidden_cosine;
  throw InvalidArgument(invalid_value("importance", text, "expected key-dispersion or hidden-cosine"));
}

KVType parse_kv_type(const std::string& text) {
  if (text == "f16") return KVType::f16;
  if (text == "f32") return KVType::f32;
  throw InvalidArgument(invalid_value("kv_type", text, "expected f16 or f32"));
}

PositionRule parse_position_rule(const std::string& text) {
  if (text == "cache") return PositionRule::cache;
  if (text == "text") return PositionRule::text;
  throw InvalidArgument(invalid_value("positions", text, "expected cache or text"));
}

}  // namespace squeezekv
