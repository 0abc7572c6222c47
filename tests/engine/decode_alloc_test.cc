// A decode step allocates nothing: this program replaces the global operator new with a counting
// one (so it is a test binary of its own) and runs steady-state decode steps of the engine with
// evicting caches, every score source, 1 and 2 threads, both position rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "squeezekv/cache/conserved_schedule.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/random_model.h"
#include "test_util.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Every replaceable form but the aligned ones (nothing here asks for over-alignment), so that
// each allocation is counted and every delete meets an allocation of its own kind. Not inlined:
// GCC would otherwise pair an inlined delete's free() with `new` and warn.
namespace {
void* counted_malloc(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

[[gnu::noinline]] void* operator new(size_t size) {
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new[](size_t size) {
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new(size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
[[gnu::noinline]] void* operator new[](size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace squeezekv {
namespace {

TEST(EngineDecode, SteadyStateStepsAllocateNothing) {
  RandomModelSpec spec;
  spec.dim = 512;  // large enough that matmuls and attention use the pool
  spec.n_layers = 2;
  spec.n_heads = 8;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 1024;
  spec.weight_type = TensorType::q8_0;
  const std::string path = (test::temp_dir() / "squeezekv_decode_alloc_test.gguf").string();
  write_random_model(path, spec);
  const Model model = Model::load(path);
  std::filesystem::remove(path);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(int32_t(3 + (i * 37) % 500));
  // (pyramidkv runs h2o's decode path; its first layer's budget exceeds this prompt, so it is still
  // legitimately growing during these steps.)
  for (const char* method : {"window", "streaming", "h2o", "squeeze", "chunkkv", "tova"}) {
    for (ScoreSource score : {ScoreSource::key_proxy, ScoreSource::attention}) {
      for (size_t threads : {1u, 2u}) {
        for (PositionRule rule : {PositionRule::span, PositionRule::cache, PositionRule::text}) {
          SCOPED_TRACE(std::string(method) + " threads " + std::to_string(threads) +
                       (score == ScoreSource::attention ? " attention" : " key-proxy") + " positions " +
                       to_string(rule));
          ThreadPool pool(threads);
          Engine engine(model, &pool);
          KVCacheConfig c;
          c.method = method;
          c.budget = 64;
          c.score = score;
          c.positions = rule;
          c.max_distance = 50;  // span: past the 100-token prompt, so rows age out and sinks are clamped
          auto cache = engine.make_cache(c);
          std::vector<float> logits;
          engine.begin_prompt(*cache);
          engine.forward(prompt, *cache, Logits::last, logits);
          engine.end_prompt(*cache);
          // Warm-up steps: buffers reach their steady size (the cache holds budget + 1 slots).
          for (int step = 0; step < 4; ++step) {
            const int32_t token = int32_t(5 + step);
            engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
          }
          const int64_t before = g_allocations.load();
          for (int step = 0; step < 16; ++step) {
            const int32_t token = int32_t(20 + step);
            engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
          }
          EXPECT_EQ(g_allocations.load() - before, 0);
        }
      }
    }
  }
}

// While a sequence is shorter than its largest scheduled budget, every new token moves the cap
// and the schedule is conserved anew: once its buffers have grown, that allocates nothing either.
TEST(EngineDecode, ConservingAScheduleAsLayersFillAllocatesNothing) {
  ConservedSchedule schedule;
  // A pyramid-like taper over 6 scheduled layers and one sliding layer (no part of it).
  schedule.set({300, 0, 240, 180, 120, 90, 60}, {true, false, true, true, true, true, true});
  int64_t total = 0;
  for (int layer : {0, 2, 3, 4, 5, 6}) total += schedule.budget(layer, 150);  // grows the buffers
  EXPECT_EQ(total, 900);
  const int64_t before = g_allocations.load();
  for (int64_t cap = 61; cap < 300; ++cap) {  // between the smallest and the largest budget
    total = 0;
    for (int layer : {0, 2, 3, 4, 5, 6}) total += schedule.budget(layer, cap);
    ASSERT_EQ(total, std::min<int64_t>(990, 6 * cap)) << "cap " << cap;  // conserved
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace squeezekv
