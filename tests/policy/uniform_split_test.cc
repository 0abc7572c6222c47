// The uniform head split is the cache as it was before head splits existed, bit for bit: a digest
// of every head's positions and scores after every update of each method, against the digests the
// code before the split gave (commit 329c2ea, this test built there unchanged).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "squeezekv/cache/model_cache.h"
#include "test_util.h"

namespace squeezekv {
namespace {

// FNV-1a over every head's slot positions and score bits, layer by layer.
void mix(uint64_t& h, uint64_t x) {
  for (int i = 0; i < 8; ++i) {
    h ^= (x >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
}

uint64_t digest(const std::string& id, const std::string& head_split) {
  KVCacheConfig c;
  c.method = id;
  c.budget = 12;
  c.n_sink = 2;
  c.head_dim = 8;
  c.set("window", 4);  // snapkv's, below the budget
  c.set("kernel", 5);  // snapkv's default when the digests were taken (it is 31 since)
  if (!head_split.empty()) c.set(std::string("head_split"), head_split);
  const int n_layers = 3, n_kv = 2, n_batch = 2;
  auto model = KVCacheBuilder::for_model(n_layers, c, n_kv, n_batch);
  uint64_t h = 1469598103934665603ull, seed = 1;
  for (int step = 0; step < 30; ++step) {
    const int n = step == 0 ? 30 : 1 + step % 2;
    for (int l = 0; l < n_layers; ++l) {
      const size_t size = size_t(n_kv * n_batch * n * 8);
      auto k = test::normal(size, seed++);
      const auto v = test::normal(size, seed++);
      for (float& x : k) x += 0.3f * float(l);
      model->layer(l).update(k.data(), v.data(), n);
      for (int head = 0; head < model->layer(l).n_heads(); ++head) {
        const HeadStore& store = model->layer(l).head(head);
        mix(h, uint64_t(store.n_slots()));
        for (int s = 0; s < store.n_slots(); ++s) {
          mix(h, uint64_t(store.positions()[s]));
          mix(h, std::bit_cast<uint32_t>(store.scores()[s]));
        }
      }
    }
  }
  return h;
}

struct Expected {
  const char* method;
  uint64_t digest;
};

constexpr Expected kBefore[] = {
    {"h2o", 0x4334be2e6ae1265eull},       {"chunkkv", 0xa65733ff6438f2f3ull},   {"knorm", 0xf84edc623c53316dull},
    {"snapkv", 0xb60a7da7c988cb6eull},    {"tova", 0x29eb6b2aa3f699c3ull},      {"squeeze", 0x783f1a077369e36bull},
    {"pyramidkv", 0x29070f67531bfd4full}, {"streaming", 0x35b3ac5e1ef4ffa3ull},
};

TEST(UniformSplit, EveryMethodKeepsWhatItKeptBefore) {
  for (const Expected& e : kBefore) {
    EXPECT_EQ(digest(e.method, ""), e.digest) << e.method;
    EXPECT_EQ(digest(e.method, "uniform"), e.digest) << e.method;
  }
}

}  // namespace
}  // namespace squeezekv
