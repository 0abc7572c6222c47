// A layer's per-head work on a pool (LayerCache::begin_update / end_update given one, and
// add_attention for different heads at once when the policy's heads are independent) leaves the
// cache exactly as one thread does, for every method and storage. Built into
// core_concurrency_test, which scripts/test.sh --sanitize also runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/thread_pool.h"
#include "test_util.h"

namespace squeezekv {
namespace {

// Enough rows that the per-head work goes to the pool: 8 heads x 300 rows > kParallelHeadSlots.
constexpr int kHeads = 8, kDim = 8, kBudget = 300, kPrompt = 320, kSteps = 120;

void expect_same_heads(const LayerCache& a, const LayerCache& b, bool rows, const std::string& where) {
  ASSERT_EQ(a.kept_bytes(), b.kept_bytes()) << where;
  for (int h = 0; h < kHeads; ++h) {
    const HeadStore& x = a.head(h);
    const HeadStore& y = b.head(h);
    ASSERT_EQ(x.n_slots(), y.n_slots()) << where << " head " << h;
    ASSERT_EQ(x.max_shift(), y.max_shift()) << where << " head " << h;
    for (int s = 0; s < x.n_slots(); ++s) {
      ASSERT_EQ(x.positions()[s], y.positions()[s]) << where << " head " << h << " slot " << s;
      ASSERT_EQ(x.scores()[s], y.scores()[s]) << where << " head " << h << " slot " << s;
    }
    if (rows) {
      const FetchedRows fx = a.fetch(h), fy = b.fetch(h);
      ASSERT_EQ(fx.keys, fy.keys) << where << " head " << h;
      ASSERT_EQ(fx.values, fy.values) << where << " head " << h;
    }
  }
}

// One update of n tokens on both caches: b's per-head work on the pool, and its attention fed
// back from the pool's threads a head per task when the policy allows it (as the engine does).
void update_both(LayerCache& a, LayerCache& b, ThreadPool& pool, int n, std::mt19937_64& rng) {
  const std::vector<float> k = test::normal(size_t(kHeads) * size_t(n) * kDim, rng());
  const std::vector<float> v = test::normal(k.size(), rng());
  a.begin_update(k.data(), v.data(), n);
  b.begin_update(k.data(), v.data(), n, &pool);
  if (a.wants_attention()) {
    std::vector<std::vector<float>> probs(kHeads);
    for (int h = 0; h < kHeads; ++h) {
      probs[size_t(h)].resize(size_t(n) * size_t(a.head(h).n_slots()));
      for (float& p : probs[size_t(h)]) p = float(rng() % 1000) / 4096.0f;
      a.add_attention(h, probs[size_t(h)].data(), n);
    }
    if (b.policy().heads_independent()) {
      pool.parallel_for(kHeads, [&](size_t h, size_t) { b.add_attention(int(h), probs[h].data(), n); });
    } else {
      for (int h = 0; h < kHeads; ++h) b.add_attention(h, probs[size_t(h)].data(), n);
    }
  }
  a.end_update();
  b.end_update(&pool);
}

TEST(ParallelHeads, APoolLeavesTheCacheExactlyAsOneThreadDoes) {
  ThreadPool pool(3);
  for (const MethodInfo& method : all_methods()) {
    for (const char* kv : {"f16", "q8_0", "kivi2"}) {
      for (const bool span : {false, true}) {
        KVCacheConfig c;
        c.method = std::string(method.id);
        c.budget = kBudget;
        c.n_sink = 4;
        c.head_dim = kDim;
        c.set("k_type", kv);
        c.set("v_type", kv);
        c.kivi_group = 8;
        c.kivi_residual = 16;
        c.positions = span ? PositionRule::span : PositionRule::text;
        c.max_distance = span ? 360 : 0;
        const std::string where = std::string(method.id) + " " + kv + (span ? " span" : " text");
        auto a = KVCacheBuilder::for_model(1, c, kHeads);
        auto b = KVCacheBuilder::for_model(1, c, kHeads);
        std::mt19937_64 rng(11);
        // The prompt in chunks, then decode steps; the rows are compared now and then (fetch
        // decodes every row), positions and scores after every update.
        int64_t most_slots = 0;
        for (int done = 0, step = 0; done < kPrompt + kSteps; ++step) {
          // (the first chunk stores enough values for the pool: 256 x 8 heads x 8 >= kParallelHeadValues)
          const int n = done == 0 ? 256 : done < kPrompt ? 64 : 1;
          update_both(a->layer(0), b->layer(0), pool, n, rng);
          done += n;
          int64_t slots = 0;
          for (int h = 0; h < kHeads; ++h) slots += b->layer(0).head(h).n_slots();
          most_slots = std::max(most_slots, slots);
          expect_same_heads(a->layer(0), b->layer(0), step % 16 == 0, where + " update " + std::to_string(step));
          if (HasFatalFailure()) return;
        }
        expect_same_heads(a->layer(0), b->layer(0), true, where + " at the end");
        ASSERT_GE(most_slots, kParallelHeadSlots) << where << ": the pool was never used";
      }
    }
  }
}

TEST(ParallelHeads, PoliciesThatShareStateAcrossHeadsSaySo) {
  for (const MethodInfo& method : all_methods()) {
    KVCacheConfig c;
    c.method = std::string(method.id);
    c.head_dim = kDim;
    auto cache = KVCacheFactory::create(c, kHeads);
    const std::string policy(cache->policy().name());
    // TOVA selects once for every head of a batch item; SnapKV keeps the prompt's attention per
    // layer; the cumulative, chunked, positional and key-norm policies score and evict each head
    // alone.
    const bool shared = policy == "tova" || policy == "snapkv" || policy == "full";
    EXPECT_EQ(cache->policy().heads_independent(), !shared) << method.id << " (" << policy << ")";
  }
}

}  // namespace
}  // namespace squeezekv
