// What perplexity and sweep share: a text scored under every configuration given, in
// llama-perplexity's chunks or as one stream, with progress on stderr. A perplexity is a sweep of
// one configuration; each command prints its own report.
#pragma once

#include <string>
#include <vector>

#include "cli/stream_report.h"
#include "squeezekv/eval/perplexity.h"
#include "squeezekv/eval/stream_perplexity.h"

namespace squeezekv::cli {

// `label`: the command, as its progress line names it ("sweep", "perplexity").
std::vector<PerplexityResult> score_chunks(Engine& engine, const std::vector<int32_t>& tokens,
                                           const std::vector<KVCacheConfig>& configs, const PerplexityOptions& options,
                                           const std::string& label);
// The stream's options with the prompt updates of n_batch tokens.
std::vector<StreamResult> score_stream(Engine& engine, const std::vector<int32_t>& tokens,
                                       const std::vector<KVCacheConfig>& configs, const StreamArgs& stream, int n_batch,
                                       const std::string& label);

}  // namespace squeezekv::cli
