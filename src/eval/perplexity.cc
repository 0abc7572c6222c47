#include "squeezekv/eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/eval/text_file.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

// log-softmax of one row, in double for the NLL and KL sums.
void log_softmax(const float* logits, int n, std::vector<double>& out) {
  out.resize(size_t(n));
  const double lse = logsumexp(logits, n);
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - lse;
}

struct Accumulator {
  double nll = 0.0, kl = 0.0;
  int64_t scored = 0, agree = 0;
  double kept_sum = 0.0, full_sum = 0.0, kept_peak = 0.0, full_peak = 0.0;
  double sliding_sum = 0.0, sliding_peak = 0.0, evicting_sum = 0.0, evicting_peak = 0.0;
  int64_t samples = 0;

  // Peaks after any update (a prefill chunk or a decode step).
  void peaks(const ModelCache& cache) {
    kept_peak = std::max(kept_peak, double(cache.kept_bytes()));
    full_peak = std::max(full_peak, double(cache.full_bytes()));
    sliding_peak = std::max(sliding_peak, double(cache.sliding_kept_bytes()));
    evicting_peak = std::max(evicting_peak, double(cache.evicting_kept_bytes()));
  }
  std::vector<double> layer_kept;
  double seconds = 0.0;
};

bool is_reference(const KVCacheConfig& c, const KVCacheConfig& reference) {
  return keeps_every_row(c) && c.key_type() == reference.key_type() && c.value_type() == reference.value_type();
}

}  // namespace

std::vector<int32_t> tokenize_text_file(const Tokenizer& tokenizer, const std::string& path) {
  std::string s = read_text_file(path);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return tokenizer.encode(s, true);
}

std::vector<PerplexityResult> evaluate_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                                  std::span<const KVCacheConfig> configs,
                                                  const PerplexityOptions& options,
                                                  const std::function<void(int, int)>& progress) {
  const ModelConfig& mc = engine.model().config();
  require(options.n_ctx >= 4 && options.n_ctx % 2 == 0, "n_ctx", options.n_ctx, "must be even and at least 4");
  require(options.n_batch >= 1, "n_batch", options.n_batch, "must be at least 1");
  require(options.max_chunks >= 0, "chunks", options.max_chunks, "must be >= 0 (0 = all)");
  require(!configs.empty(), "configs", 0, "need at least one cache configuration");
  const int available = int(tokens.size()) / options.n_ctx;
  require(available >= 1, "text", std::to_string(tokens.size()) + " tokens",
          "shorter than one chunk of n_ctx = " + std::to_string(options.n_ctx));
  const int chunks = options.max_chunks > 0 ? std::min(options.max_chunks, available) : available;
  const int first = options.n_ctx / 2;
  const int vocab = mc.vocab;

  KVCacheConfig reference_config;
  reference_config.method = "full";
  // The reference is the unevicted cache in the first configuration's float format (f16 or f32),
  // or f16 when that is a quantized one: KL measures eviction and quantization alike.
  const KVCacheConfig& first_config = configs.front();
  const bool float_first = kv_float(first_config.key_type()) && kv_float(first_config.value_type());
  reference_config.kv_type = float_first ? first_config.key_type() : KVType::f16;
  if (float_first) {
    reference_config.k_type = first_config.k_type;
    reference_config.v_type = first_config.v_type;
  }
  std::vector<std::unique_ptr<ModelCache>> caches;  // null where the reference pass serves
  for (const KVCacheConfig& c : configs) {
    caches.push_back(is_reference(c, reference_config) ? nullptr : engine.make_cache(c));
  }
  auto reference = engine.make_cache(reference_config);
  std::vector<Accumulator> acc(configs.size());
  for (Accumulator& a : acc) a.layer_kept.assign(size_t(mc.n_layers), 0.0);
  std::vector<PerplexityResult> results(configs.size());

  const int passes_per_chunk = 1 + int(std::count_if(configs.begin(), configs.end(), [&](const KVCacheConfig& c) {
                                 return !is_reference(c, reference_config);
                               }));
  int done = 0;
  std::vector<double> ref_logp(size_t(first - 1) * size_t(vocab));  // full cache, per scored position
  std::vector<int32_t> ref_top(size_t(first - 1));
  std::vector<int32_t> chunk(size_t(options.n_ctx));
  std::vector<float> logits;
  std::vector<double> logp;

  // Runs one chunk through `cache`; calls score(j, logits) for each scored position j.
  auto run_chunk = [&](ModelCache& cache, Accumulator* stats, const auto& score) {
    const auto start = std::chrono::steady_clock::now();
    PrefillOptions prefill_options;
    prefill_options.n_batch = options.n_batch;
    prefill_options.max_rows = options.n_ctx;
    prefill_options.logits = Logits::none;
    prefill(engine, cache, std::span(chunk).first(size_t(first)), prefill_options, logits, [&](int64_t) {
      if (stats) stats->peaks(cache);
    });
    for (int j = first; j < options.n_ctx - 1; ++j) {
      engine.forward(std::span(chunk).subspan(size_t(j), 1), cache, Logits::last, logits);
      score(j - first, logits.data());
      if (stats) {
        stats->kept_sum += double(cache.kept_bytes());
        stats->full_sum += double(cache.full_bytes());
        stats->sliding_sum += double(cache.sliding_kept_bytes());
        stats->evicting_sum += double(cache.evicting_kept_bytes());
        stats->peaks(cache);
        ++stats->samples;
        for (int l = 0; l < cache.n_layers(); ++l) stats->layer_kept[size_t(l)] += cache.layer(l).rows_per_head();
      }
    }
    if (stats) stats->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  // Scores one position of configuration c against the reference distribution.
  auto score_into = [&](Accumulator& a, int k, const float* row) {
    log_softmax(row, vocab, logp);
    const double* ref = ref_logp.data() + size_t(k) * size_t(vocab);
    a.nll -= logp[size_t(chunk[size_t(first + k + 1)])];
    double kl = 0.0;
    for (int i = 0; i < vocab; ++i) kl += std::exp(ref[i]) * (ref[i] - logp[size_t(i)]);
    a.kl += kl;
    a.agree += int32_t(argmax(row, vocab)) == ref_top[size_t(k)];
    ++a.scored;
  };
  Accumulator reference_stats;
  reference_stats.layer_kept.assign(size_t(mc.n_layers), 0.0);
  // BOS first in each chunk where the model wants one (llama-perplexity: only when add_bos_token is set).
  const Tokenizer& tokenizer = engine.model().tokenizer();
  const std::optional<int32_t> chunk_bos = tokenizer.add_bos_default() ? tokenizer.bos() : std::nullopt;
  for (int ci = 0; ci < chunks; ++ci) {
    std::copy(tokens.begin() + long(ci) * options.n_ctx, tokens.begin() + long(ci + 1) * options.n_ctx, chunk.begin());
    if (chunk_bos) chunk[0] = *chunk_bos;
    // The shared full-cache pass: reference distributions for KL and top-1, and the scores of
    // every configuration that is the full cache itself (KL 0 by construction, not recomputed).
    run_chunk(*reference, &reference_stats, [&](int k, const float* row) {
      log_softmax(row, vocab, logp);
      std::copy(logp.begin(), logp.end(), ref_logp.begin() + long(k) * vocab);
      ref_top[size_t(k)] = int32_t(argmax(row, vocab));
      for (size_t c = 0; c < configs.size(); ++c) {
        if (is_reference(configs[c], reference_config)) score_into(acc[c], k, row);
      }
    });
    if (progress) progress(++done, chunks * passes_per_chunk);
    for (size_t c = 0; c < configs.size(); ++c) {
      if (is_reference(configs[c], reference_config)) {
        results[c].layer_budgets = reference->budgets();
        results[c].layer_schedule = reference->scheduled_budgets();
        continue;
      }
      run_chunk(*caches[c], &acc[c], [&](int k, const float* row) { score_into(acc[c], k, row); });
      if (progress) progress(++done, chunks * passes_per_chunk);
      results[c].layer_budgets = caches[c]->budgets();
      results[c].layer_schedule = caches[c]->scheduled_budgets();
      if (const BudgetCoordinator* coordinator = caches[c]->coordinator()) {
        results[c].layer_importance = coordinator->measurements();
      }
    }
  }
  for (size_t c = 0; c < configs.size(); ++c) {
    if (!is_reference(configs[c], reference_config)) continue;
    const int64_t scored = acc[c].scored, agree = acc[c].agree;
    const double nll = acc[c].nll, kl = acc[c].kl;
    acc[c] = reference_stats;
    acc[c].scored = scored;
    acc[c].agree = agree;
    acc[c].nll = nll;
    acc[c].kl = kl;
  }
  for (size_t c = 0; c < configs.size(); ++c) {
    const Accumulator& a = acc[c];
    PerplexityResult& r = results[c];
    r.config = configs[c];
    r.chunks = chunks;
    r.scored = a.scored;
    r.mean_nll = a.nll / double(a.scored);
    r.perplexity = std::exp(r.mean_nll);
    r.mean_kl = a.kl / double(a.scored);
    r.top1_agreement = double(a.agree) / double(a.scored);
    r.mean_kept_bytes = a.kept_sum / double(a.samples);
    r.mean_full_bytes = a.full_sum / double(a.samples);
    r.peak_kept_bytes = a.kept_peak;
    r.peak_full_bytes = a.full_peak;
    r.mean_sliding_kept_bytes = a.sliding_sum / double(a.samples);
    r.mean_evicting_kept_bytes = a.evicting_sum / double(a.samples);
    r.peak_sliding_kept_bytes = a.sliding_peak;
    r.peak_evicting_kept_bytes = a.evicting_peak;
    r.layer_windows = sliding_windows_of(reference->layer_kinds());  // every cache of the model has them
    for (double k : a.layer_kept) r.layer_mean_kept.push_back(k / double(a.samples));
    r.seconds = a.seconds;
  }
  return results;
}

}  // namespace squeezekv
