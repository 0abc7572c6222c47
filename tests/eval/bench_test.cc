// The bench harness on the real model: every (threads, test, depth, cache) combination gets one
// row with one sample per repetition, the paired ratio against the first cache is exactly 1 for
// that cache, the caches hold what their depth and tests put in them, and bad options are named.
// Timings themselves are never asserted (speed belongs to benchmarks, not tests).
#include <gtest/gtest.h>

#include <cmath>

#include "squeezekv/base/errors.h"
#include "squeezekv/eval/bench.h"
#include "squeezekv/ops/thread_pool.h"
#include "test_util.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

using test::stories;

KVCacheConfig cache(const std::string& method, int budget) {
  KVCacheConfig c;
  c.method = method;
  c.budget = budget;
  c.n_sink = 2;
  return c;
}

TEST(Bench, OneRowPerCombinationWithOneSamplePerRepetition) {
  BenchOptions o;
  o.n_prompt = {8, 0};  // 0 entries are skipped
  o.n_gen = {4};
  o.threads = {1, 2};
  o.depths = {0, 16};
  o.repetitions = 3;
  o.n_batch = 5;
  o.caches = {cache("window", 8), cache("squeeze", 8), cache("full", 8)};
  o.bandwidth_bytes = 1 << 20;
  std::vector<std::string> progress;
  const BenchReport report = run_bench(stories(), o, [&](const std::string& line) { progress.push_back(line); });
  const std::vector<BenchRow>& rows = report.rows;
  const double weight_bytes = double(model_facts(stories(), "").weight_bytes_per_token);
  ASSERT_EQ(rows.size(), 2u * 2u * 2u * 3u);  // threads x tests x depths x caches
  size_t i = 0;
  for (int threads : {1, 2}) {
    for (bool generation : {false, true}) {
      for (int depth : {0, 16}) {
        for (const char* method : {"window", "squeeze", "full"}) {
          const BenchRow& r = rows[i++];
          SCOPED_TRACE(r.test() + " d" + std::to_string(r.depth) + " t" + std::to_string(r.threads) + " " + r.cache);
          EXPECT_EQ(r.threads, threads);
          EXPECT_EQ(r.generation, generation);
          EXPECT_EQ(r.n_tokens, generation ? 4 : 8);
          EXPECT_EQ(r.depth, depth);
          EXPECT_EQ(r.config.method, method);
          ASSERT_EQ(r.tokens_per_second.samples.size(), 3u);
          ASSERT_EQ(r.time_vs_first_cache.samples.size(), 3u);
          EXPECT_GT(r.tokens_per_second.min, 0.0);
          EXPECT_LE(r.tokens_per_second.min, r.tokens_per_second.median);
          EXPECT_LE(r.tokens_per_second.median, r.tokens_per_second.max);
          if (r.config.method == "window") {
            for (double ratio : r.time_vs_first_cache.samples) EXPECT_EQ(ratio, 1.0);
          }
          for (double ratio : r.time_vs_first_cache.samples) EXPECT_GT(ratio, 0.0);
          // The probe runs after each generation repetition; each share pairs that repetition's
          // weight bytes per second with that probe read.
          if (generation) {
            ASSERT_EQ(r.bandwidth.samples.size(), 3u);
            ASSERT_EQ(r.bandwidth_share.samples.size(), 3u);
            for (size_t rep = 0; rep < 3; ++rep) {
              const double expected = weight_bytes * r.tokens_per_second.samples[rep] / r.bandwidth.samples[rep];
              EXPECT_DOUBLE_EQ(r.bandwidth_share.samples[rep], expected);
            }
          } else {
            EXPECT_TRUE(r.bandwidth.samples.empty());
            EXPECT_TRUE(r.bandwidth_share.samples.empty());
          }
          // What each cache holds after the row's last repetition.
          int64_t expected_rows = 8;  // a bounded cache at its budget
          if (r.config.method == "full") {
            // Depth 0 is cleared before every repetition; depth 16 keeps growing through the pp
            // tests (3 x 8) and then the tg tests (3 x 4).
            expected_rows = depth == 0 ? r.n_tokens : 16 + 3 * 8 + (generation ? 3 * 4 : 0);
          } else if (depth == 0 && r.n_tokens < 8) {
            expected_rows = r.n_tokens;
          }
          if (r.config.method == "squeeze") {
            // Layer budgets around the average of 8: a layer holds min(its budget, tokens seen).
            EXPECT_LE(r.rows_per_layer, expected_rows);
            EXPECT_GT(r.rows_per_layer, 0);
          } else {
            EXPECT_EQ(r.rows_per_layer, expected_rows);
          }
          EXPECT_GT(r.kv_kept_bytes, 0u);
        }
      }
    }
  }
  EXPECT_EQ(rows[0].cache, "window b8");
  EXPECT_EQ(rows[2].cache, "full");
  EXPECT_FALSE(progress.empty());
  ASSERT_EQ(report.bandwidth.size(), 2u);  // one summary per thread count, 3 probe reads each
  EXPECT_EQ(report.bandwidth[1].threads, 2);
  EXPECT_EQ(report.bandwidth[1].bytes, size_t(1) << 20);
  EXPECT_EQ(report.bandwidth[1].bytes_per_second.samples.size(), 3u);
  EXPECT_GT(report.peak_rss_bytes, 0u);
}

// Each fill to a depth reports every n_batch chunk, named by its cache and depth, ending at the
// depth; a depth-0 cache has no fill.
TEST(Bench, ReportsEveryFillChunkByChunk) {
  const BenchOptions o{.n_prompt = {4},
                       .n_gen = {0},
                       .threads = {1},
                       .depths = {0, 12},
                       .repetitions = 1,
                       .n_batch = 5,
                       .caches = {cache("window", 8), cache("full", 8)}};
  struct Report {
    std::string what;
    int64_t fed, depth;
    bool operator==(const Report&) const = default;
  };
  std::vector<Report> reports;
  std::vector<std::string> lines;
  run_bench(
      stories(), o, [&](const std::string& line) { lines.push_back(line); },
      [&](const std::string& what, int64_t fed, int64_t depth) {
        reports.push_back({what, fed, depth});
      });
  const std::string window = "filling window b8 to depth 12", full = "filling full to depth 12";
  const std::vector<Report> expected = {{window, 5, 12}, {window, 10, 12}, {window, 12, 12},
                                        {full, 5, 12},   {full, 10, 12},   {full, 12, 12}};
  EXPECT_EQ(reports, expected);
  ASSERT_GE(lines.size(), 2u);  // each fill's milestone line comes after its chunks
  EXPECT_EQ(lines[0].rfind("filled window b8 to depth 12", 0), 0u) << lines[0];
}

TEST(Bench, RejectsBadOptionsByName) {
  auto expect_named = [](BenchOptions o, const std::string& name) {
    try {
      run_bench(stories(), o);
      ADD_FAILURE() << "accepted bad " << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  BenchOptions o;
  o.n_prompt = {4};
  o.n_gen = {0};
  o.repetitions = 0;
  expect_named(o, "repetitions");
  o.repetitions = 1;
  o.depths = {-1};
  expect_named(o, "depth");
  o.depths = {0};
  o.threads = {};
  expect_named(o, "threads");
  o.threads = {1};
  o.n_batch = 0;
  expect_named(o, "n_batch");
  o.n_batch = 1;
  o.bandwidth_bytes = 100;
  expect_named(o, "bandwidth_bytes");
}

TEST(Bench, SpreadOfSamples) {
  const Spread odd = Spread::of({3.0, 1.0, 2.0});
  EXPECT_EQ(odd.median, 2.0);
  EXPECT_EQ(odd.mean, 2.0);
  EXPECT_EQ(odd.stddev, 1.0);
  EXPECT_EQ(odd.min, 1.0);
  EXPECT_EQ(odd.max, 3.0);
  EXPECT_EQ(odd.samples, (std::vector<double>{3.0, 1.0, 2.0}));  // in measurement order
  EXPECT_EQ(Spread::of({4.0, 1.0, 2.0, 3.0}).median, 2.5);
  EXPECT_EQ(Spread::of({}).median, 0.0);
}

TEST(Bench, ModelFactsCountEveryMatrixOnce) {
  const ModelConfig& c = stories().config();
  const ModelFacts f = model_facts(stories(), "stories260K.gguf");
  const uint64_t kv_dim = uint64_t(c.n_kv_heads) * uint64_t(c.head_dim);
  const uint64_t attention =
      2 * uint64_t(c.dim) * uint64_t(c.n_heads) * uint64_t(c.head_dim) + 2 * uint64_t(c.dim) * kv_dim;
  const uint64_t ffn = 3 * uint64_t(c.dim) * uint64_t(c.ffn_dim);
  EXPECT_EQ(f.matmul_macs_per_token, uint64_t(c.n_layers) * (attention + ffn) + uint64_t(c.vocab) * uint64_t(c.dim));
  EXPECT_EQ(f.weight_type, "F32");
  // f32 weights: 4 bytes per multiply-add, plus the norms and one embedding row.
  const uint64_t norms = 4 * (2 * uint64_t(c.n_layers) + 1) * uint64_t(c.dim);
  EXPECT_EQ(f.weight_bytes_per_token, 4 * f.matmul_macs_per_token + norms + 4 * uint64_t(c.dim));
}

TEST(Bench, BandwidthProbeShape) {
  ThreadPool pool(2);
  const BandwidthResult r = measure_read_bandwidth(1 << 20, &pool, 3);
  EXPECT_EQ(r.threads, 2);
  EXPECT_EQ(r.bytes, size_t(1) << 20);
  EXPECT_EQ(r.bytes_per_second.samples.size(), 3u);
  EXPECT_GT(r.bytes_per_second.min, 0.0);
  EXPECT_THROW(measure_read_bandwidth(1024, nullptr, 1), InvalidArgument);
  EXPECT_THROW(measure_read_bandwidth(1 << 20, nullptr, 0), InvalidArgument);
}

// --profile: the passes' time by operation lies within the timed time of every row, each
// operation a pass runs gets some of it, and without the option every row's profile is empty.
TEST(Bench, ProfileSplitsThePassesTimeByOperation) {
  BenchOptions o;
  o.n_prompt = {8};
  o.n_gen = {4};
  o.threads = {2};
  o.depths = {0, 16};
  o.repetitions = 2;
  o.caches = {cache("full", 8), cache("h2o", 8)};
  for (bool profile : {false, true}) {
    o.profile = profile;
    const BenchReport report = run_bench(stories(), o);
    ASSERT_EQ(report.rows.size(), 2u * 2u * 2u);
    for (const BenchRow& r : report.rows) {
      SCOPED_TRACE(r.test() + " d" + std::to_string(r.depth) + " " + r.cache + (profile ? " profiled" : ""));
      if (!profile) {
        EXPECT_EQ(r.op_seconds.total(), 0.0);
        continue;
      }
      // Seconds per token by operation, against the timed seconds per token of the repetitions.
      double timed = 0;
      for (double tps : r.tokens_per_second.samples) timed += 1.0 / tps;
      timed /= double(r.tokens_per_second.samples.size());
      EXPECT_GT(r.op_seconds.total(), 0.0);
      EXPECT_LE(r.op_seconds.total(), timed * (1 + 1e-9));
      for (EngineOp op :
           {EngineOp::embed, EngineOp::norms, EngineOp::qkv, EngineOp::cache_write, EngineOp::attention,
            EngineOp::cache_settle, EngineOp::attn_out, EngineOp::mlp_up, EngineOp::mlp_down, EngineOp::logits}) {
        EXPECT_GT(r.op_seconds.seconds(op), 0.0) << to_string(op);
      }
    }
  }
}

}  // namespace
}  // namespace squeezekv
