#include "squeezekv/policy/token_policy.h"

#include <string>

#include "policy/cumulative_policy.h"
#include "policy/policies.h"
#include "squeezekv/core/errors.h"

namespace squeezekv {

bool is_token_policy(std::string_view name) {
  return name == "full" || name == "cumulative" || name == "chunked" || name == "tova" ||
         name == "streaming" || name == "window" || name == "snapkv";
}

std::unique_ptr<TokenPolicy> make_token_policy(std::string_view name, const KVCacheConfig& config) {
  if (name == "full") return make_full_policy();
  if (name == "cumulative") return std::make_unique<CumulativePolicy>(config);
  if (name == "chunked") return make_chunked_policy(config);
  if (name == "tova") return make_tova_policy(config);
  if (name == "streaming") return make_streaming_policy(config, true);
  if (name == "window") return make_streaming_policy(config, false);
  if (name == "snapkv") return make_snapkv_policy(config);
  throw InvalidArgument(invalid_value(
      "policy", std::string(name),
      "unknown token policy (full, cumulative, chunked, tova, streaming, window, snapkv)"));
}

}  // namespace squeezekv
