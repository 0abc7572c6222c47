// Benchmarks of the cache core (speed lives here, never in the tests):
//  - concentration_score, O(n D), next to the pairwise O(n^2 D) oracle;
//  - one decode-step update (score one key against B rows, evict one) for every method at
//    B = 512, D = 128, 8 KV heads, next to the cost of just reading the kept fp16 rows;
//  - the same for a whole model's cache (32 layers x 8 KV heads x D = 128, average budget 512,
//    the layers' budgets set by each method's allocator): BM_ModelDecodeStep/<method>;
//  - one layer's bookkeeping of an attention-scored decode step in each storage format, on one
//    thread and with a pool of two (BM_AttentionScoredStep/<kv-type>/threads:<n>): what the cache
//    costs a step besides the attention itself.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "squeezekv/alloc/concentration.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

void BM_Concentration(benchmark::State& state) {
  const int n = int(state.range(0)), dim = 128;
  const auto keys = gaussian(size_t(n) * dim, 1);
  for (auto _ : state) benchmark::DoNotOptimize(concentration_score(keys.data(), n, dim));
  state.SetComplexityN(n);
  state.counters["rows/s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Concentration)->RangeMultiplier(2)->Range(512, 65536)->Complexity(benchmark::oN);

void BM_ConcentrationPairwise(benchmark::State& state) {
  const int n = int(state.range(0)), dim = 128;
  const auto keys = gaussian(size_t(n) * dim, 1);
  for (auto _ : state) benchmark::DoNotOptimize(concentration_score_pairwise(keys.data(), n, dim));
}
BENCHMARK(BM_ConcentrationPairwise)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);

constexpr int kHeads = 8, kDim = 128, kBudget = 512;

// One layer at its budget, then timed single-token updates.
void BM_DecodeStep(benchmark::State& state, const char* method) {
  KVCacheConfig c;
  c.method = method;
  c.budget = kBudget;
  c.head_dim = kDim;
  auto cache = KVCacheFactory::create(c, kHeads);
  const auto prompt = gaussian(size_t(kHeads) * 1024 * kDim, 2);
  const auto prompt_v = gaussian(prompt.size(), 3);
  cache->update(prompt.data(), prompt_v.data(), 1024);
  // Keep going past snapkv's one-shot compression so every method runs its decode path.
  const auto steps = gaussian(size_t(kHeads) * kDim * 256, 4);
  size_t i = 0;
  for (auto _ : state) {
    const float* k = steps.data() + (i % 256) * kHeads * kDim;
    cache->update(k, k, 1);
    ++i;
  }
  state.counters["rows"] = cache->tokens_kept();
  state.SetBytesProcessed(int64_t(state.iterations()) * cache->tokens_kept() * kHeads * kDim * 2 * 2);
}

// The floor: reading every kept fp16 row of K and V once (what attention itself costs to read).
void BM_ReadKeptRows(benchmark::State& state) {
  const size_t n = size_t(kHeads) * kBudget * kDim;
  std::vector<uint16_t> k(n, 0x3C00), v(n, 0x3C00);
  std::vector<float> q(kDim, 0.5f), out(kBudget);
  for (auto _ : state) {
    for (int h = 0; h < kHeads; ++h) {
      row_dots(q.data(), k.data() + size_t(h) * kBudget * kDim, KVType::f16, kBudget, kDim, out.data());
      benchmark::DoNotOptimize(out.data());
      rows_weighted_sum(out.data(), v.data() + size_t(h) * kBudget * kDim, KVType::f16, kBudget, kDim, q.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n) * 2 * 2);
}
BENCHMARK(BM_ReadKeptRows);

// One decode step's attention of one KV head at the 1B model's shape (head_dim 64, a GQA group of
// 4 query heads) over 4096 rows stored in each format: scores, softmax and the weighted value sum,
// reading the stored rows directly (block formats decoded in registers).
void BM_AttendRows(benchmark::State& state) {
  const auto type = KVType(state.range(0));
  constexpr size_t kRows = 4096, kHd = 64, kGroup = 4;
  const std::vector<float> x = gaussian(kRows * kHd, 9);
  std::vector<std::byte> k(kRows * kv_row_bytes(type, kHd)), v(k.size());
  store_rows(x.data(), k.data(), type, x.size(), kHd);
  store_rows(x.data(), v.data(), type, x.size(), kHd);
  const std::vector<float> q = gaussian(kGroup * kHd, 10);
  std::vector<float> probs(kGroup * kRows), out(kGroup * kHd);
  std::vector<uint8_t> mask(kRows, 1);
  for (auto _ : state) {
    query_probs(q.data(), kGroup, kHd, k.data(), type, kRows, kHd, mask.data(), 0.125f, probs.data(), kRows);
    std::fill(out.begin(), out.end(), 0.0f);
    rows_weighted_sum_group(probs.data(), kGroup, kRows, v.data(), type, kRows, kHd, out.data(), kHd);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(to_string(type));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * k.size()));
}
BENCHMARK(BM_AttendRows)->Arg(int(KVType::f16))->Arg(int(KVType::q8_0))->Arg(int(KVType::q4_0));

// h2o at budget 512 with attention scores, at the 1B model's shape (8 KV heads, head_dim 64): a
// 1024-token prompt, then timed decode steps of begin_update, add_attention and end_update. The
// probabilities are drawn at random (heavy-tailed, zero on free slots) so that evictions scatter
// over the rows as real attention makes them; KIVI's held rows then build up as they do in
// `generate`. Attention itself (the kernels) is not timed: BM_AttendRows and ops_bench do that.
void BM_AttentionScoredStep(benchmark::State& state, KVType type) {
  constexpr int kHd = 64, kBank = 64, kMaxSlots = 2048;
  KVCacheConfig c;
  c.method = "h2o";
  c.budget = kBudget;
  c.head_dim = kHd;
  c.kv_type = type;
  c.score = ScoreSource::attention;
  auto cache = KVCacheFactory::create(c, kHeads);
  const auto prompt = gaussian(size_t(kHeads) * 1024 * kHd, 2);
  cache->update(prompt.data(), prompt.data(), 1024);
  std::vector<float> bank = gaussian(size_t(kBank) * kMaxSlots, 5);
  for (float& x : bank) x = std::exp(2.0f * x);
  const auto steps = gaussian(size_t(kHeads) * kHd * 256, 4);
  // Threads as the engine uses them: each head's storage and eviction work on the pool, and its
  // attention fed back from the pool's threads, a head per task.
  const auto threads = size_t(state.range(0));
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  std::vector<float> probs(size_t(kHeads) * kMaxSlots);
  size_t i = 0;
  const auto feed = [&](size_t h) {
    const HeadStore& head = cache->head(int(h));
    const float* b = bank.data() + ((i + h) % kBank) * kMaxSlots;
    float* p = probs.data() + h * kMaxSlots;
    for (int s = 0; s < head.n_slots(); ++s) p[s] = head.live(s) ? b[s] : 0.0f;
    cache->add_attention(int(h), p, 1);
  };
  for (auto _ : state) {
    const float* k = steps.data() + (i % 256) * kHeads * kHd;
    cache->begin_update(k, k, 1, pool.get());
    if (pool) {
      pool->parallel_for(kHeads, [&](size_t h, size_t) { feed(h); });
    } else {
      for (size_t h = 0; h < kHeads; ++h) feed(h);
    }
    cache->end_update(pool.get());
    ++i;
  }
  int held = 0, slots = 0;
  for (int h = 0; h < kHeads; ++h) {
    held += cache->head(h).held();
    slots += cache->head(h).n_slots();
  }
  state.SetLabel(to_string(type));
  state.counters["slots/head"] = double(slots) / kHeads;
  state.counters["held/head"] = double(held) / kHeads;
}
BENCHMARK_CAPTURE(BM_AttentionScoredStep, f16, KVType::f16)->ArgName("threads")->Arg(1)->Arg(2);
BENCHMARK_CAPTURE(BM_AttentionScoredStep, q8_0, KVType::q8_0)->ArgName("threads")->Arg(1)->Arg(2);
BENCHMARK_CAPTURE(BM_AttentionScoredStep, kivi2, KVType::kivi2)->ArgName("threads")->Arg(1)->Arg(2);
BENCHMARK_CAPTURE(BM_AttentionScoredStep, kivi4, KVType::kivi4)->ArgName("threads")->Arg(1)->Arg(2);

constexpr int kLayers = 32;

// A whole model's cache after a 1024-token prompt (every layer fed the same keys, shifted per
// layer so the squeeze allocator sees different concentrations), then timed decode steps: one
// token's update of all 32 layers.
void BM_ModelDecodeStep(benchmark::State& state, const char* method) {
  KVCacheConfig c;
  c.method = method;
  c.budget = kBudget;
  c.head_dim = kDim;
  auto cache = KVCacheBuilder::for_model(kLayers, c, kHeads);
  const auto prompt = gaussian(size_t(kHeads) * 1024 * kDim, 2);
  const auto prompt_v = gaussian(prompt.size(), 3);
  std::vector<float> shifted(prompt.size());
  for (int l = 0; l < kLayers; ++l) {
    const float shift = 0.05f * float(l);  // deeper layers: more concentrated keys
    for (size_t i = 0; i < prompt.size(); ++i) shifted[i] = prompt[i] + shift * float(i % kDim == 0) * 20.0f;
    cache->layer(l).update(shifted.data(), prompt_v.data(), 1024);
  }
  const auto steps = gaussian(size_t(kHeads) * kDim * 256, 4);
  size_t i = 0;
  for (auto _ : state) {
    const float* k = steps.data() + (i % 256) * kHeads * kDim;
    for (int l = 0; l < kLayers; ++l) cache->layer(l).update(k, k, 1);
    ++i;
  }
  int64_t rows = 0;
  for (int l = 0; l < kLayers; ++l) rows += cache->layer(l).tokens_kept();
  state.counters["rows/layer"] = double(rows) / kLayers;
  state.counters["KV MiB"] = double(cache->kept_bytes()) / double(1 << 20);
}

const bool registered = [] {
  for (const MethodInfo& m : all_methods()) {
    benchmark::RegisterBenchmark(("BM_DecodeStep/" + std::string(m.id)).c_str(),
                                 [id = m.id](benchmark::State& s) { BM_DecodeStep(s, id.data()); });
  }
  for (const MethodInfo& m : all_methods()) {
    benchmark::RegisterBenchmark(("BM_ModelDecodeStep/" + std::string(m.id)).c_str(), [id = m.id](benchmark::State& s) {
      BM_ModelDecodeStep(s, id.data());
    })->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace squeezekv
