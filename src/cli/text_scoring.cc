#include "cli/text_scoring.h"

#include <functional>

#include "cli/progress.h"

namespace squeezekv::cli {

std::vector<PerplexityResult> score_chunks(Engine& engine, const std::vector<int32_t>& tokens,
                                           const std::vector<KVCacheConfig>& configs, const PerplexityOptions& options,
                                           const std::string& label) {
  Progress progress(label + ": chunk passes");
  return evaluate_perplexity(engine, tokens, configs, options, std::ref(progress));
}

std::vector<StreamResult> score_stream(Engine& engine, const std::vector<int32_t>& tokens,
                                       const std::vector<KVCacheConfig>& configs, const StreamArgs& stream, int n_batch,
                                       const std::string& label) {
  StreamOptions options = stream.options;
  options.n_batch = n_batch;
  Progress progress(label + " --stream: scored tokens (K)");
  return evaluate_stream_perplexity(engine, tokens, configs, options, [&](int64_t done, int64_t total) {
    progress(int(done / 1024), int(total / 1024));
  });
}

}  // namespace squeezekv::cli
