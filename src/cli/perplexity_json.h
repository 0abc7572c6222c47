// The measured figures of one perplexity run as JSON, shared by `perplexity --json` and the
// sweep's rows (each adds how it names the cache).
#pragma once

#include <nlohmann/json.hpp>

#include "squeezekv/eval/perplexity.h"

namespace squeezekv::cli {

nlohmann::json perplexity_metrics_json(const PerplexityResult& r);

}  // namespace squeezekv::cli
