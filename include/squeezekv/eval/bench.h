// Speed measurements of the engine with any cache, like llama-bench: prompt processing (pp) and
// generation (tg) in tokens/s over repetitions, thread counts, starting context depths and cache
// configurations, with the median and spread of each; and a memory-bandwidth probe so that the
// generation speed can be read as weight bytes per second against what the machine can stream.
//
// Side by side: for one thread count, repetitions are the outer loop and the (depth, cache
// configuration) pairs the inner one (in generation, token by token), so a noisy neighbour slows
// every configuration alike; each row also reports its time relative to the first configuration
// at the same depth, per repetition (a paired ratio), which is what comparisons should quote.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/engine/model.h"
#include "squeezekv/engine/op_profile.h"

namespace squeezekv {

class ThreadPool;

struct BenchOptions {
  std::vector<int> n_prompt = {128, 512};  // pp tests (tokens per test; 0 entries skipped)
  std::vector<int> n_gen = {128};          // tg tests
  std::vector<int> threads = {1};          // thread counts (the caller included)
  // Starting context depth: the cache is first filled with d tokens (prefill, not timed) once
  // per thread count and configuration, before any test; later repetitions continue from where the last one
  // stopped, so with a full cache the depth grows by the tokens of each repetition (at depth 0 the
  // cache is cleared before every repetition instead).
  std::vector<int> depths = {0};
  int repetitions = 5;
  int n_batch = 512;                  // prompt tokens per forward call
  std::vector<KVCacheConfig> caches;  // one result row per configuration (empty: full)
  uint64_t seed = 1;                  // the token ids fed in (pseudo-random, deterministic)
  bool warmup = true;                 // one untimed token before the first test
  // > 0: after every repetition of a generation test, streaming reads of this many bytes with
  // the same threads (the memory-bandwidth probe; the median of 5 reads), so each generation
  // row's share of the bandwidth is a ratio of two measurements taken moments apart.
  size_t bandwidth_bytes = 0;
  // Time each test's passes by operation (Engine::set_profile): BenchRow::op_seconds.
  bool profile = false;
};

// Summary of repeated measurements (tokens/s or bytes/s).
struct Spread {
  std::vector<double> samples;
  double median = 0, mean = 0, stddev = 0, min = 0, max = 0;
  static Spread of(std::vector<double> samples);
};

struct BenchRow {
  std::string cache;  // label: method, budget, score source
  KVCacheConfig config;
  int threads = 1;
  int depth = 0;
  bool generation = false;  // tg (true) or pp
  int n_tokens = 0;
  Spread tokens_per_second;
  Spread time_vs_first_cache;  // this row's time / the first configuration's at this depth, per repetition
  // Generation rows with the probe on: the probe's bytes/s after each repetition (median of its
  // reads), and the weight bytes read per second in that repetition divided by it.
  Spread bandwidth;
  Spread bandwidth_share;
  size_t kv_kept_bytes = 0;                                      // after the last repetition
  size_t kv_sliding_kept_bytes = 0, kv_evicting_kept_bytes = 0;  // its two parts (core/layer_kind.h)
  std::vector<int> layer_windows;                                // per layer: 0 global (evicting), W sliding
  int64_t rows_per_layer = 0;  // average rows held per layer and KV head after the last repetition
  // BenchOptions::profile: seconds per token by operation, over every repetition (else zeros).
  OpProfile op_seconds;
  std::string test() const { return (generation ? "tg" : "pp") + std::to_string(n_tokens); }
};

struct BandwidthResult {
  int threads = 1;
  size_t bytes = 0;  // buffer size read per repetition
  Spread bytes_per_second;
};

struct ModelFacts {
  std::string path, name, weight_type;
  uint64_t file_bytes = 0, n_params = 0;
  // Bytes of weights a decode step reads (every matrix of every layer, the output matrix, the
  // norms; one embedding row) and the multiply-adds of a prompt token's matmuls.
  uint64_t weight_bytes_per_token = 0;
  uint64_t matmul_macs_per_token = 0;
  uint64_t output_macs = 0;     // the output projection's share, which a prompt computes for its last token only
  uint64_t repacked_bytes = 0;  // matrices repacked at load (Model::repacked_bytes)
};

ModelFacts model_facts(const Model& model, const std::string& path);

struct BenchReport {
  std::vector<BenchRow> rows;
  std::vector<BandwidthResult> bandwidth;  // the probe's samples per thread count (when it ran)
  uint64_t peak_rss_bytes = 0;             // this process's peak resident memory before the probe's buffer
};

// A fill's progress: what is being filled ("filling full to depth 8192"), tokens fed so far and
// the depth, after every n_batch chunk (a 32k fill takes minutes).
using FillProgress = std::function<void(const std::string& what, int64_t fed, int64_t depth)>;

// Measures every (threads, depth, test, cache) combination. progress (may be empty) receives one
// line per finished fill and measurement; fill_progress (may be empty), each fill chunk by chunk.
BenchReport run_bench(const Model& model, const BenchOptions& options,
                      const std::function<void(const std::string&)>& progress = {},
                      const FillProgress& fill_progress = {});

// The memory-bandwidth probe: a buffer allocated and touched once, then read whole (split into
// page-aligned chunks across a pool's workers) as often as asked.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(size_t bytes);      // at least 4 KiB
  double bytes_per_second(ThreadPool* pool);  // one timed read; null pool: the calling thread
  size_t bytes() const { return buffer_.size(); }

 private:
  std::vector<uint8_t> buffer_;
  std::vector<uint64_t> sums_;
  uint64_t checksum_ = 0;
};

// `repetitions` reads with a fresh probe of `bytes`.
BandwidthResult measure_read_bandwidth(size_t bytes, ThreadPool* pool, int repetitions);

// Peak resident set of this process so far (getrusage), bytes.
uint64_t peak_rss_bytes();

// "full", "squeeze b512", "squeeze b512 key-proxy", "squeeze b512 pos=text": a short label of a
// configuration (the score source and the position rule when they are not the default).
std::string cache_label(const KVCacheConfig& config);

}  // namespace squeezekv
