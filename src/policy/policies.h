// Constructors of the policies defined in their own files (the factory is token_policy.cc).
#pragma once

#include <memory>

#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

std::unique_ptr<TokenPolicy> make_chunked_policy(const KVCacheConfig& config);
std::unique_ptr<TokenPolicy> make_tova_policy(const KVCacheConfig& config);
std::unique_ptr<TokenPolicy> make_streaming_policy(const KVCacheConfig& config, bool sinks);
std::unique_ptr<TokenPolicy> make_snapkv_policy(const KVCacheConfig& config);
std::unique_ptr<TokenPolicy> make_full_policy();

}  // namespace squeezekv
