// A cache shared by threads: single-writer, so overlapping calls are rejected with a clear error
// and never corrupt the cache (the Python module serialises them; see tests/python/test_cache.py).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "test_util.h"

namespace squeezekv {
namespace {

constexpr int kThreads = 8;
constexpr int kDim = 16;
constexpr int kHeads = 2;

KVCacheConfig config_of(const char* method) {
  KVCacheConfig c;
  c.method = method;
  c.budget = 16;
  c.n_sink = 4;
  c.head_dim = kDim;
  return c;
}

TEST(Concurrency, EightThreadsOnOneModelCacheNeverCorruptIt) {
  for (const char* method : {"h2o", "streaming", "window", "full", "squeeze"}) {
    auto model = KVCacheBuilder::for_model(2, config_of(method), kHeads);
    const std::vector<float> k = test::normal(size_t(kHeads) * 4 * kDim, 1);
    std::atomic<int> done{0}, rejected{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 200; ++i) {
          LayerCache& layer = model->layer((t + i) % 2);
          try {
            if (i % 50 == 49) {
              model->reset();
            } else if (i % 7 == 3) {
              (void)layer.fetch(0);
            } else {
              layer.update(k.data(), k.data(), 4);
            }
            ++done;
          } catch (const InvalidArgument& e) {
            const std::string what = e.what();
            if (what.find("in use by another thread") != std::string::npos) ++rejected;
            else ++other;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(other.load(), 0) << method;
    EXPECT_EQ(done.load() + rejected.load(), kThreads * 200) << method;
    // The cache still works and keeps its invariants.
    model->reset();
    for (int i = 0; i < 20; ++i) {
      for (int l = 0; l < 2; ++l) model->layer(l).update(k.data(), k.data(), 4);
    }
    for (int l = 0; l < 2; ++l) {
      EXPECT_EQ(model->layer(l).tokens_seen(), 80) << method;
      if (std::string(method) != "full") {
        EXPECT_LE(model->layer(l).tokens_kept(), model->layer(l).layer_budget()) << method;
      }
      EXPECT_EQ(model->layer(l).fetch(1).positions.size(), size_t(model->layer(l).tokens_kept(1))) << method;
    }
  }
}

TEST(Concurrency, OverlappingCallIsRejectedNamingTheCall) {
  auto layer = KVCacheFactory::create(config_of("h2o"), kHeads);
  const std::vector<float> k = test::normal(size_t(kHeads) * 4 * kDim, 2);
  // Eight threads released together: whatever overlaps is rejected, the rest is appended once.
  std::atomic<bool> go{false};
  std::atomic<int> appended{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 100; ++i) {
        try {
          layer->update(k.data(), k.data(), 4);
          ++appended;
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("update: the cache is in use by another thread"), std::string::npos);
        }
      }
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(layer->tokens_seen(), int64_t(appended.load()) * 4);
  EXPECT_LE(layer->tokens_kept(), 16);
}

TEST(Concurrency, CallersSerialisingTheCacheLoseNothing) {
  auto model = KVCacheBuilder::for_model(2, config_of("h2o"), kHeads);
  const std::vector<float> k = test::normal(size_t(kHeads) * 4 * kDim, 3);
  std::mutex lock;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::lock_guard<std::mutex> hold(lock);
        model->layer(t % 2).update(k.data(), k.data(), 4);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int l = 0; l < 2; ++l) EXPECT_EQ(model->layer(l).tokens_seen(), kThreads / 2 * 50 * 4);
}

}  // namespace
}  // namespace squeezekv
