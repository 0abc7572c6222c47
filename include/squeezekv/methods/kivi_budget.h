// Whether KIVI storage compresses anything under an evicting policy. The newest kivi_residual rows
// stay fp16 and keys are quantized a whole group at a time, so a residual of more than half the
// budget, or a group larger than the budget, leaves (nearly) every kept row in fp16: the cache then
// holds more bytes than plain f16 would. KVCacheConfig::validate refuses such a cache with this
// message, so every command, the server, C and Python do.
#pragma once

#include <string>

#include "squeezekv/methods/kv_cache_config.h"

namespace squeezekv {

// "" when KIVI compresses here (or the cache is full, or not KIVI), else "name = value: why".
std::string kivi_budget_unfit(const KVCacheConfig& config);

}  // namespace squeezekv
