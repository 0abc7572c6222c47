// K/V storage as a registered component (core/storage_info.h): every format has one storage; a
// head grows as its keys' storage says; bytes_bound bounds what a head that keeps every row
// allocates; bytes per token, unfit formats and budgets, and the parameters each storage owns.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "squeezekv/core/head_store.h"
#include "squeezekv/core/storage_info.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/methods/registry.h"
#include "test_util.h"

namespace squeezekv {
namespace {

TEST(Storage, EveryFormatHasExactlyOneStorage) {
  for (const KVFormat& f : kKVFormats) {
    int n = 0;
    for (const StorageInfo* s : all_storage()) n += s->stores(f.type) ? 1 : 0;
    EXPECT_EQ(n, 1) << f.name;
    EXPECT_TRUE(storage_of(f.type).stores(f.type)) << f.name;
  }
  EXPECT_EQ(storage_of(KVType::kivi2).id, "kivi");
  EXPECT_EQ(storage_of(KVType::q4_0).id, "rows");
}

TEST(Storage, OwnsItsParametersAndIsInUseOnlyWhenItHoldsKeysOrValues) {
  ASSERT_NE(storage_owning("kivi_residual"), nullptr);
  EXPECT_EQ(storage_owning("kivi_residual")->id, "kivi");
  EXPECT_EQ(storage_owning("budget"), nullptr);
  const StorageInfo& kivi = storage_of(KVType::kivi4);
  EXPECT_FALSE(storage_in_use(kivi, {KVType::q8_0, KVType::f16, 64}));
  EXPECT_TRUE(storage_in_use(kivi, {KVType::q8_0, KVType::kivi2, 64}));
  EXPECT_EQ(param_owners("kivi_group"), std::vector<std::string>{"storage kivi"});
}

// Hand-computed: f16 at head_dim 64 is 128 bytes a row; q8_0 two blocks of 2 + 32; kivi2 keys a
// group of 32 tokens is 64 channels x (fp16 min and scale + 32 2-bit codes) = 768 bytes, 24 a
// token; a value row two groups of 32 channels, 2 x (4 + 8) = 24 bytes.
TEST(Storage, BytesPerTokenByFormat) {
  EXPECT_EQ(token_bytes({KVType::f16, KVType::f16, 64}), 256u);
  EXPECT_EQ(token_bytes({KVType::q8_0, KVType::q4_0, 64}), 68u + 36u);
  EXPECT_EQ(token_bytes({KVType::kivi2, KVType::kivi2, 64, 32}), 48u);
  KVCacheConfig config;
  config.head_dim = 64;
  config.k_type = KVType::kivi2;
  config.v_type = KVType::q8_0;
  EXPECT_EQ(kv_token_bytes(config), 24u + 68u);
}

// An append that needs more slots grows the head to what its keys' storage says (or what the
// append needs, when more).
TEST(Storage, HeadGrowsAsItsKeysStorageSays) {
  for (const KVType type : {KVType::f16, KVType::q8_0, KVType::kivi4}) {
    HeadStore head(32, type, type, KiviLayout{8, 16, 0});
    const StorageParams params = head.storage_params();
    std::vector<int> slots;
    int64_t pos = 0;
    for (int step = 0; step < 60; ++step) {
      const int n = 1 + step % 7;
      const std::vector<float> k = test::normal(size_t(n) * 32, uint64_t(step)), v = test::normal(size_t(n) * 32, 99);
      const int before = head.capacity();
      const int needed = head.n_slots() + n;
      head.append(k.data(), v.data(), n, pos, 0, slots);
      head.settle_kivi();
      pos += n;
      if (needed > before) {
        const int64_t grown = storage_of(type).grown(before, params);
        EXPECT_EQ(head.capacity(), head.capacity_for(int(std::max<int64_t>(grown, needed)))) << kv_format(type).name;
      } else {
        EXPECT_EQ(head.capacity(), before);
      }
    }
  }
}

// A head that keeps every row never allocates more than bytes_bound promises for one layer that
// has seen those rows, with its live rows bounded as admission bounds a full cache's (grown_rows),
// whatever the update sizes.
TEST(Storage, BytesBoundHoldsForAHeadKeepingEveryRow) {
  std::mt19937 rng(7);
  for (const KVType k : {KVType::f16, KVType::q4_0, KVType::kivi2}) {
    for (const KVType v : {KVType::f32, KVType::kivi4}) {
      HeadStore head(32, k, v, KiviLayout{8, 16, 4});
      const StorageParams params = head.storage_params();
      std::vector<int> slots;
      int64_t seen = 0;
      int chunk = 1;
      while (seen < 600) {
        const int n = 1 + int(rng() % 40);
        chunk = std::max(chunk, n);
        const std::vector<float> kk = test::normal(size_t(n) * 32, rng()), vv = test::normal(size_t(n) * 32, rng());
        head.append(kk.data(), vv.data(), n, seen, 0, slots);
        head.settle_kivi();
        seen += n;
        const size_t bound = bytes_bound(params, {1, grown_rows(seen), true, seen, chunk});
        ASSERT_LE(head.resident_bytes(), bound) << kv_format(k).name << "/" << kv_format(v).name << " at " << seen;
      }
    }
  }
}

TEST(Storage, UnfitFormatsAndBudgetsNameTheParameter) {
  EXPECT_EQ(storage_unfit({KVType::f16, KVType::f16, 64}), "");
  EXPECT_NE(storage_unfit({KVType::q4_0, KVType::f16, 48}).find("k_type = q4_0"), std::string::npos);
  EXPECT_NE(storage_unfit({KVType::f16, KVType::kivi2, 64, 12}).find("kivi_group = 12"), std::string::npos);
  EXPECT_NE(storage_unfit({KVType::kivi2, KVType::kivi2, 64, 32, 48}).find("kivi_residual = 48"), std::string::npos);
  EXPECT_EQ(storage_budget_unfit({KVType::q8_0, KVType::q8_0, 64}, 20), "");
  EXPECT_EQ(storage_budget_unfit({KVType::kivi2, KVType::kivi2, 64, 32, 128}, 256), "");
  EXPECT_NE(storage_budget_unfit({KVType::kivi2, KVType::kivi2, 64, 32, 128}, 255).find("kivi_residual = 128"),
            std::string::npos);
  EXPECT_NE(storage_budget_unfit({KVType::kivi2, KVType::f16, 64, 32, 0}, 31).find("kivi_group = 32"),
            std::string::npos);
  // Values alone in KIVI: a key group never forms, so only the residual is asked.
  EXPECT_EQ(storage_budget_unfit({KVType::f16, KVType::kivi2, 64, 32, 0}, 31), "");
}

}  // namespace
}  // namespace squeezekv
