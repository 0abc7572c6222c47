// The bench harness (see bench.h). Timing uses steady_clock around whole prompts and around each
// generated token's forward call (two clock reads against a forward pass of microseconds or more).
#include "squeezekv/eval/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <span>

#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/stream_read.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kProbeReads = 5;  // probe reads after each generation repetition

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

uint64_t matrix_bytes(const WeightMatrix& w) { return uint64_t(row_bytes(w.type, w.n_cols)) * uint64_t(w.n_rows); }
uint64_t matrix_macs(const WeightMatrix& w) { return uint64_t(w.n_rows) * uint64_t(w.n_cols); }

// Deterministic pseudo-random token ids (splitmix64), as llama-bench feeds random tokens.
class TokenStream {
 public:
  TokenStream(uint64_t seed, int vocab) : state_(seed), vocab_(uint64_t(vocab)) {}
  int32_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return int32_t((z ^ (z >> 31)) % vocab_);
  }
  void fill(std::vector<int32_t>& tokens, int n) {
    tokens.resize(size_t(n));
    for (int32_t& t : tokens) t = next();
  }

 private:
  uint64_t state_;
  uint64_t vocab_;
};

// A prompt of `tokens` in n_batch chunks, as one prompt when `as_prompt`, continuing the cache.
void prefill_tokens(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens, int n_batch, bool as_prompt,
                    int64_t max_rows, std::vector<float>& logits,
                    const std::function<void(int64_t)>& after_chunk = {}) {
  PrefillOptions options;
  options.n_batch = n_batch;
  options.max_rows = max_rows;
  options.reset = false;
  options.as_prompt = as_prompt;
  prefill(engine, cache, tokens, options, logits, after_chunk);
}

int64_t mean_rows(const ModelCache& cache) {
  int64_t rows = 0, heads = 0;
  for (int l = 0; l < cache.n_layers(); ++l) {
    const LayerCache& layer = cache.layer(l);
    for (int h = 0; h < layer.n_heads(); ++h, ++heads) rows += layer.tokens_kept(h);
  }
  return heads > 0 ? rows / heads : 0;
}

}  // namespace

Spread Spread::of(std::vector<double> samples) {
  Spread s;
  s.samples = samples;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / double(n);
  double var = 0;
  for (double x : samples) var += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(var / double(n - 1)) : 0.0;
  return s;
}

std::string cache_label(const KVCacheConfig& config) {
  std::string label = config.method;
  const bool evicts = !keeps_every_row(config);
  if (evicts) label += " b" + std::to_string(config.budget);
  // The engine's default score is attention (bench, generate, perplexity); the other is named.
  if (config.score == ScoreSource::key_proxy && reads_param(config, "score")) label += " key-proxy";
  if (evicts && config.positions != PositionRule::span) label += " pos=" + to_string(config.positions);
  if (config.key_type() == config.value_type()) {
    if (config.key_type() != KVType::f16) label += " " + to_string(config.key_type());
  } else {
    label += " k " + to_string(config.key_type()) + " v " + to_string(config.value_type());
  }
  return label;
}

ModelFacts model_facts(const Model& model, const std::string& path) {
  ModelFacts f;
  f.path = path;
  f.name = model.config().name;
  f.n_params = model.n_params();
  f.file_bytes = model.weight_bytes();
  f.repacked_bytes = model.repacked_bytes();
  const ModelConfig& c = model.config();
  std::map<std::string, uint64_t> type_bytes;  // the dominant matrix type names the model
  auto matrix = [&](const WeightMatrix& w) {
    f.weight_bytes_per_token += matrix_bytes(w);
    f.matmul_macs_per_token += matrix_macs(w);
    type_bytes[std::string(tensor_type_name(uint32_t(w.type)))] += matrix_bytes(w);
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layer(l);
    for (const WeightMatrix* m : w.matrices()) matrix(*m);
    f.weight_bytes_per_token += 4 * (w.attn_norm.size() + w.ffn_norm.size() + w.bq.size() + w.bk.size() + w.bv.size());
  }
  f.weight_bytes_per_token += matrix_bytes(model.output()) + 4 * model.output_norm().size();
  f.weight_bytes_per_token += row_bytes(model.token_embedding().type, model.token_embedding().n_cols);
  f.matmul_macs_per_token += matrix_macs(model.output());
  f.output_macs = matrix_macs(model.output());
  type_bytes[std::string(tensor_type_name(uint32_t(model.output().type)))] += matrix_bytes(model.output());
  uint64_t most = 0;
  for (const auto& [name, bytes] : type_bytes) {
    if (bytes > most) {
      most = bytes;
      f.weight_type = name;
    }
  }
  return f;
}

BenchReport run_bench(const Model& model, const BenchOptions& o,
                      const std::function<void(const std::string&)>& progress, const FillProgress& fill_progress) {
  require(o.repetitions >= 1, "repetitions", o.repetitions, "must be >= 1");
  require(o.n_batch >= 1, "n_batch", o.n_batch, "must be >= 1");
  require(!o.threads.empty(), "threads", "[]", "give at least one thread count");
  for (int t : o.threads) require(t >= 1, "threads", t, "must be >= 1");
  for (int d : o.depths) require(d >= 0, "depth", d, "must be >= 0");
  for (int p : o.n_prompt) require(p >= 0, "n_prompt", p, "must be >= 0");
  for (int n : o.n_gen) require(n >= 0, "n_gen", n, "must be >= 0");
  std::vector<KVCacheConfig> configs = o.caches;
  if (configs.empty()) {
    configs.emplace_back();
    configs.back().method = "full";
  }
  if (o.bandwidth_bytes > 0)
    require(o.bandwidth_bytes >= 4096, "bandwidth_bytes", o.bandwidth_bytes, "must be 0 or >= 4096");
  const int vocab = model.config().vocab;
  const double weight_bytes = double(model_facts(model, "").weight_bytes_per_token);
  BenchReport report;
  std::vector<BenchRow>& rows = report.rows;
  std::unique_ptr<BandwidthProbe> probe;  // allocated at the first generation test
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  TokenStream stream(o.seed, vocab);
  // The longest sequence a cache filled to `depth` sees: the depth plus every repetition of the
  // longest test (caches at depth > 0 continue from one repetition to the next).
  int longest = 0;
  for (int n : o.n_prompt) longest = std::max(longest, n);
  for (int n : o.n_gen) longest = std::max(longest, n);
  auto max_rows = [&](int depth) { return int64_t(depth) + int64_t(longest) * o.repetitions; };
  require(longest > 0, "n_prompt", "0 and n_gen = 0", "nothing to measure (give a test of at least one token)");
  // A full cache holds every row it is fed: like generate, it may not run past the model's context.
  // Depth 0 is cleared before every repetition; a deeper cache keeps every test's tokens.
  const int64_t context = model.config().context_length;
  int64_t every_test = 0;  // the tokens of one repetition of every test
  for (int n : o.n_prompt) every_test += n;
  for (int n : o.n_gen) every_test += n;
  for (const KVCacheConfig& c : configs) {
    if (!keeps_every_row(c)) continue;
    const std::string why =
        " tokens of a full cache (lower the depth, the tests or the repetitions, or use an "
        "evicting method)";
    require(longest <= context,
            std::find(o.n_prompt.begin(), o.n_prompt.end(), longest) != o.n_prompt.end() ? "n_prompt" : "n_gen",
            longest, "longer than the model's context of " + std::to_string(context) + why);
    for (int depth : o.depths) {
      if (depth == 0) continue;
      const int64_t filled = int64_t(depth) + every_test * o.repetitions;
      require(filled <= context, "depth", depth,
              "plus every test x " + std::to_string(o.repetitions) + " repetitions fills a cache to " +
                  std::to_string(filled) + " rows, past the model's context of " + std::to_string(context) + why);
    }
  }

  for (int threads : o.threads) {
    ThreadPool pool{size_t(threads)};
    Engine engine(model, &pool);
    if (o.warmup) {  // pages the weights in and grows the engine's buffers
      auto cache = engine.make_cache(configs.front());
      const int32_t token = 1 % vocab;
      engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
    }
    // One cache per (depth, configuration), all filled first; every test then interleaves them
    // all within each repetition, so depth 0 and depth d are measured side by side too.
    struct Slot {
      int depth;
      size_t config;
      std::unique_ptr<ModelCache> cache;
    };
    std::vector<Slot> slots;
    std::vector<double> probe_samples;  // every probe read at this thread count
    for (int depth : o.depths) {
      for (size_t k = 0; k < configs.size(); ++k) {
        slots.push_back({depth, k, engine.make_cache(configs[k])});
        if (depth == 0) continue;
        stream.fill(tokens, depth);
        const auto start = Clock::now();
        const std::string filled = cache_label(configs[k]) + " to depth " + std::to_string(depth);
        const std::string filling = "filling " + filled;
        std::function<void(int64_t)> after_chunk;
        if (fill_progress) after_chunk = [&](int64_t fed) { fill_progress(filling, fed, depth); };
        prefill_tokens(engine, *slots.back().cache, tokens, o.n_batch, true, max_rows(depth), logits, after_chunk);
        if (progress) {
          progress("filled " + filled + " with " + std::to_string(threads) + " thread(s) in " +
                   std::to_string(seconds_since(start)) + " s");
        }
      }
    }
    // Every slot sees the same tokens in a repetition. Generation interleaves the slots token by
    // token (slot 0's step, slot 1's step, ...), so drift in the machine's speed lands on all of
    // them alike; each slot's time is also divided by that of the first configuration at its
    // depth within the same repetition, a paired ratio that cancels what noise is left.
    auto run_tests = [&](const std::vector<int>& sizes, bool generation) {
      for (int size : sizes) {
        if (size == 0) continue;
        std::vector<std::vector<double>> samples(slots.size()), ratios(slots.size()), shares(slots.size());
        std::vector<double> seconds(slots.size()), probed;
        std::vector<OpProfile> profiles(slots.size());
        auto profile_slot = [&](size_t k) { engine.set_profile(o.profile ? &profiles[k] : nullptr); };
        if (generation && o.bandwidth_bytes > 0 && !probe) {
          report.peak_rss_bytes = peak_rss_bytes();
          probe = std::make_unique<BandwidthProbe>(o.bandwidth_bytes);
        }
        for (int rep = 0; rep < o.repetitions; ++rep) {
          stream.fill(tokens, size);
          for (size_t k = 0; k < slots.size(); ++k) {
            if (slots[k].depth == 0) slots[k].cache->reset();
            seconds[k] = 0;
          }
          if (generation) {
            for (int i = 0; i < size; ++i) {
              for (size_t k = 0; k < slots.size(); ++k) {
                profile_slot(k);
                const auto start = Clock::now();
                engine.forward(std::span(tokens).subspan(size_t(i), 1), *slots[k].cache, Logits::last, logits);
                seconds[k] += seconds_since(start);
              }
            }
          } else {
            for (size_t k = 0; k < slots.size(); ++k) {
              profile_slot(k);
              const auto start = Clock::now();
              prefill_tokens(engine, *slots[k].cache, tokens, o.n_batch, slots[k].depth == 0, max_rows(slots[k].depth),
                             logits);
              seconds[k] = seconds_since(start);
            }
          }
          engine.set_profile(nullptr);
          if (generation && probe) {
            // The median of a few reads: one read is a 30 ms snapshot of a shared machine.
            std::vector<double> reads(kProbeReads);
            for (double& r : reads) r = probe->bytes_per_second(&pool);
            probed.push_back(Spread::of(reads).median);
            probe_samples.push_back(probed.back());
          }
          for (size_t k = 0; k < slots.size(); ++k) {
            samples[k].push_back(double(size) / seconds[k]);
            const size_t first = k - slots[k].config;  // configuration 0 at the same depth
            ratios[k].push_back(seconds[k] / seconds[first]);
            if (!probed.empty()) shares[k].push_back(weight_bytes * samples[k].back() / probed.back());
          }
        }
        for (size_t k = 0; k < slots.size(); ++k) {
          BenchRow row;
          row.config = configs[slots[k].config];
          row.cache = cache_label(row.config);
          row.threads = threads;
          row.depth = slots[k].depth;
          row.generation = generation;
          row.n_tokens = size;
          row.tokens_per_second = Spread::of(samples[k]);
          row.time_vs_first_cache = Spread::of(ratios[k]);
          row.bandwidth = Spread::of(probed);
          row.bandwidth_share = Spread::of(shares[k]);
          row.kv_kept_bytes = slots[k].cache->kept_bytes();
          row.kv_sliding_kept_bytes = slots[k].cache->sliding_kept_bytes();
          row.kv_evicting_kept_bytes = slots[k].cache->evicting_kept_bytes();
          row.layer_windows = sliding_windows_of(slots[k].cache->layer_kinds());
          row.rows_per_layer = mean_rows(*slots[k].cache);
          const double tokens_timed = double(size) * o.repetitions;
          for (size_t op = 0; op < kEngineOps; ++op) {
            row.op_seconds.add(EngineOp(op), profiles[k].seconds(EngineOp(op)) / tokens_timed);
          }
          if (progress) {
            progress(row.test() + " @ d" + std::to_string(row.depth) + ", " + std::to_string(threads) + " thread(s), " +
                     row.cache + ": " + std::to_string(row.tokens_per_second.median) + " tokens/s");
          }
          rows.push_back(std::move(row));
        }
      }
    };
    run_tests(o.n_prompt, false);
    run_tests(o.n_gen, true);
    if (!probe_samples.empty()) report.bandwidth.push_back({threads, o.bandwidth_bytes, Spread::of(probe_samples)});
  }
  if (!probe) report.peak_rss_bytes = peak_rss_bytes();
  return report;
}

BandwidthProbe::BandwidthProbe(size_t bytes) {
  require(bytes >= 4096, "bytes", bytes, "the probe needs a buffer of at least 4 KiB");
  buffer_.resize(bytes);
  for (size_t i = 0; i < bytes; i += 4096) buffer_[i] = uint8_t(i >> 12);  // every page resident
}

double BandwidthProbe::bytes_per_second(ThreadPool* pool) {
  const size_t bytes = buffer_.size();
  const size_t workers = pool ? pool->num_workers() : 1;
  // Contiguous chunks, several per worker, aligned to 4 KiB.
  const size_t n_chunks = workers * 8;
  const size_t chunk = (bytes / n_chunks + 4095) / 4096 * 4096;
  sums_.assign(n_chunks, 0);
  auto task = [&](size_t i, size_t) {
    const size_t begin = std::min(bytes, i * chunk);
    sums_[i] = stream_read(buffer_.data() + begin, std::min(bytes, begin + chunk) - begin);
  };
  const auto start = Clock::now();
  if (pool) {
    pool->parallel_for(n_chunks, task);
  } else {
    for (size_t i = 0; i < n_chunks; ++i) task(i, 0);
  }
  const double seconds = seconds_since(start);
  // The checksum is kept and stored, so no compiler can drop the reads.
  checksum_ += std::accumulate(sums_.begin(), sums_.end(), uint64_t{0});
  volatile uint64_t sink = checksum_;
  (void)sink;
  return double(bytes) / seconds;
}

BandwidthResult measure_read_bandwidth(size_t bytes, ThreadPool* pool, int repetitions) {
  require(repetitions >= 1, "repetitions", repetitions, "must be >= 1");
  BandwidthProbe probe(bytes);
  std::vector<double> samples;
  samples.reserve(size_t(repetitions));
  for (int rep = 0; rep < repetitions; ++rep) samples.push_back(probe.bytes_per_second(pool));
  BandwidthResult r;
  r.threads = pool ? int(pool->num_workers()) : 1;
  r.bytes = bytes;
  r.bytes_per_second = Spread::of(samples);
  return r;
}

uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return uint64_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace squeezekv
