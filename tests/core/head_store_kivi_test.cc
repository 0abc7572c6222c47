// KIVI storage inside a HeadStore: the flush schedule step by step on a small hand case, held rows
// in quantized key groups, the fp16 sinks, exact byte accounting, and the readers (attention
// probabilities, weighted values) equal to decoding every row and attending in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "squeezekv/base/fp16.h"
#include "squeezekv/core/head_store.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/ops/kivi_rows.h"
#include "test_util.h"

namespace squeezekv {
namespace {

constexpr int kDim = 8, kGroup = 8, kResidual = 16;

struct Feed {
  HeadStore head;
  std::vector<float> keys, values;  // every row appended, by position
  int64_t next = 0;

  explicit Feed(KVType k, KVType v, int64_t fp16_below = 0)
      : head(kDim, k, v, KiviLayout{kGroup, kResidual, fp16_below}) {}

  // Appends n rows and settles as LayerCache does after an update (no eviction here).
  std::vector<int> add(int n, uint64_t seed) {
    const std::vector<float> k = test::normal(size_t(n) * kDim, seed), v = test::normal(size_t(n) * kDim, seed + 99);
    keys.insert(keys.end(), k.begin(), k.end());
    values.insert(values.end(), v.begin(), v.end());
    std::vector<int> slots;
    head.append(k.data(), v.data(), n, next, 0, slots);
    next += n;
    head.settle_kivi();
    return slots;
  }
};

size_t expected_bytes(const HeadStore& h, KVType k, KVType v) {
  const auto cap = size_t(h.capacity());
  size_t bytes = h.fp16_bytes();
  bytes += kv_kivi(k) ? cap / kGroup * kivi_key_group_bytes(kivi_bits(k), kGroup, kDim) : cap * kv_row_bytes(k, kDim);
  bytes += cap * (kv_kivi(v) ? kivi_value_row_bytes(kivi_bits(v), kGroup, kDim) : kv_row_bytes(v, kDim));
  return bytes;
}

TEST(HeadStoreKivi, FlushScheduleStepByStep) {
  Feed f(KVType::kivi2, KVType::kivi2);
  for (int step = 1; step <= 40; ++step) {
    SCOPED_TRACE(step);
    f.add(1, uint64_t(step));
    // Keys: fp16 until 16 wait (the residual), then both full groups at once; the count climbs
    // again from 0 (KIVI's schedule). Values: the newest 16 stay fp16, each older one is quantized.
    const int expected_keys = step % kResidual;
    EXPECT_EQ(f.head.fp16_keys(), expected_keys);
    EXPECT_EQ(f.head.fp16_values(), std::min(step, kResidual));
    for (int s = 0; s < f.head.n_slots(); ++s) {
      const int64_t pos = f.head.positions()[s];
      EXPECT_EQ(f.head.key_quantized(s), pos < step - expected_keys) << "slot " << s << " position " << pos;
    }
    EXPECT_EQ(f.head.held(), 0);
    EXPECT_EQ(f.head.resident_bytes(), expected_bytes(f.head, KVType::kivi2, KVType::kivi2));
    // The pools stay within 8 free rows of what they hold.
    EXPECT_LE(f.head.fp16_bytes(), size_t(f.head.fp16_keys() + f.head.fp16_values() + 16) * kDim * 2);
  }
}

TEST(HeadStoreKivi, LoadedRowsAreFp16OrWithinHalfAStep) {
  Feed f(KVType::kivi4, KVType::kivi2);
  f.add(37, 5);
  f.add(10, 6);  // 5 + 10 keys wait: below the residual, so they stay fp16
  std::vector<float> key(kDim), value(kDim);
  for (int s = 0; s < f.head.n_slots(); ++s) {
    const auto pos = size_t(f.head.positions()[s]);
    f.head.load_key(s, key.data());
    f.head.load_value(s, value.data());
    for (int d = 0; d < kDim; ++d) {
      const float k = f.keys[pos * kDim + size_t(d)], v = f.values[pos * kDim + size_t(d)];
      // kivi4 keys: a step is the channel's range over 8 tokens / 15; kivi2 values: the row's / 3.
      // Both ranges are below 8 for these normal samples.
      if (f.head.key_quantized(s)) EXPECT_NEAR(key[size_t(d)], k, 8.0f / 15.0f / 2.0f + 1e-3f);
      else EXPECT_NEAR(key[size_t(d)], k, std::fabs(k) / 1024.0f);
      EXPECT_NEAR(value[size_t(d)], v, 8.0f / 3.0f / 2.0f + 1e-3f);
    }
  }
  EXPECT_GT(f.head.fp16_keys(), 0);
  EXPECT_LT(f.head.fp16_keys(), f.head.n_live());
}

TEST(HeadStoreKivi, EvictedRowsStayHeldUntilTheirGroupEmpties) {
  Feed f(KVType::kivi2, KVType::f16);
  f.add(20, 1);  // 16 keys quantized (groups 0 and 1), 4 in fp16 (group 2)
  ASSERT_EQ(f.head.fp16_keys(), 4);
  const int slots_before = f.head.n_slots();
  f.head.evict(3);
  f.head.apply_evictions();
  EXPECT_EQ(f.head.held(), 1);
  EXPECT_EQ(f.head.n_live(), 19);
  // The held slot is not reused: the next row takes a new slot in the open group.
  const std::vector<int> slots = f.add(1, 2);
  EXPECT_NE(slots[0], 3);
  EXPECT_EQ(f.head.n_slots(), slots_before + 1);
  // Evicting the rest of group 0 frees its 8 slots at once, and new rows reuse them.
  for (int s = 0; s < kGroup; ++s) {
    if (s != 3) f.head.evict(s);
  }
  f.head.apply_evictions();
  EXPECT_EQ(f.head.held(), 0);
  const std::vector<int> reused = f.add(3, 3);
  for (int s : reused) EXPECT_LT(s, kGroup);
  // Compaction keeps quantized groups whole (their held rows too) and packs the rest.
  f.head.evict(9);
  f.head.apply_evictions();
  ASSERT_EQ(f.head.held(), 1);
  std::vector<float> before(kDim), after(kDim);
  const int64_t some_pos = f.head.positions()[10];
  f.head.load_key(10, before.data());
  f.head.compact(0);
  EXPECT_EQ(f.head.held(), 1);
  EXPECT_EQ(f.head.capacity() % kGroup, 0);
  for (int s = 0; s < f.head.n_slots(); ++s) {
    if (f.head.positions()[s] != some_pos) continue;
    f.head.load_key(s, after.data());
    EXPECT_EQ(before, after);
  }
  EXPECT_EQ(f.head.resident_bytes(), expected_bytes(f.head, KVType::kivi2, KVType::f16));
}

// A new row that finds no free slot reopens the quantized group with the fewest live rows when at
// most half of it is live: its live keys move to fp16 for good (decoded once, never quantized
// again), its dead slots take the new rows, and the capacity does not grow.
TEST(HeadStoreKivi, ASparseGroupReopensInsteadOfGrowing) {
  Feed f(KVType::kivi4, KVType::f16);
  f.add(16, 1);  // 16 keys wait (the residual): groups 0 and 1 quantized, every slot live
  ASSERT_EQ(f.head.capacity(), 16);
  ASSERT_EQ(f.head.fp16_keys(), 0);
  for (int s : {0, 1, 2, 3, 4, 9}) f.head.evict(s);  // group 0 keeps 3 rows, group 1 keeps 7
  f.head.apply_evictions();
  ASSERT_EQ(f.head.held(), 6);
  std::vector<float> before(3 * kDim), after(kDim);
  for (int s = 5; s < 8; ++s) f.head.load_key(s, before.data() + size_t(s - 5) * kDim);

  const std::vector<int> slots = f.add(1, 2);
  EXPECT_LT(slots[0], 5);  // a dead slot of group 0
  EXPECT_EQ(f.head.capacity(), 16);
  EXPECT_EQ(f.head.held(), 1);       // slot 9: group 1 is more than half live
  EXPECT_EQ(f.head.fp16_keys(), 4);  // the 3 kept keys and the new one
  for (int s = 5; s < 8; ++s) {
    SCOPED_TRACE(s);
    EXPECT_FALSE(f.head.key_quantized(s));
    f.head.load_key(s, after.data());
    for (int d = 0; d < kDim; ++d) {
      const float decoded = before[size_t(s - 5) * kDim + size_t(d)];
      EXPECT_EQ(after[size_t(d)], fp16_to_f32(f32_to_fp16(decoded)));  // the codes' value, in fp16
    }
  }
  EXPECT_TRUE(f.head.key_quantized(10));
  EXPECT_EQ(f.head.resident_bytes(), expected_bytes(f.head, KVType::kivi4, KVType::f16));

  // Growth packs the rows (kept keys follow their rows) and the next flush quantizes full groups
  // without the kept keys: positions 5-7 stay the same fp16 values.
  f.add(20, 3);
  int kept = 0, quantized = 0;
  for (int s = 0; s < f.head.n_slots(); ++s) {
    const int64_t pos = f.head.positions()[s];
    if (pos == HeadStore::kFree) continue;
    quantized += f.head.key_quantized(s);
    if (pos < 5 || pos > 7) continue;
    ++kept;
    EXPECT_FALSE(f.head.key_quantized(s)) << "position " << pos;
    f.head.load_key(s, after.data());
    for (int d = 0; d < kDim; ++d) {
      EXPECT_EQ(after[size_t(d)], fp16_to_f32(f32_to_fp16(before[size_t(pos - 5) * kDim + size_t(d)])));
    }
  }
  EXPECT_EQ(kept, 3);
  EXPECT_GE(quantized, 2 * kGroup);
  EXPECT_EQ(f.head.fp16_keys() + quantized, f.head.n_live());
  EXPECT_EQ(f.head.resident_bytes(), expected_bytes(f.head, KVType::kivi4, KVType::f16));
}

// Scattered eviction over a long run (h2o-like: each row has a fixed random score, the newest 8
// are kept, the lowest score goes): survivors spread over many groups, and quantized groups that
// are at most half live reopen before the head grows, so the slots stay within twice the budget
// plus two groups (without reopening this run reaches 136 slots).
TEST(HeadStoreKivi, ScatteredEvictionStaysBounded) {
  constexpr int kBudget = 40, kRecent = 8;
  Feed f(KVType::kivi2, KVType::kivi2);
  std::vector<float> score;  // by position
  std::mt19937_64 rng(7);
  int most = 0;
  for (int step = 0; step < 3000; ++step) {
    f.add(1, uint64_t(step) + 100);
    score.push_back(float(rng() % 1000000));
    while (f.head.n_live() > kBudget) {
      int lowest = -1;
      for (int s = 0; s < f.head.n_slots(); ++s) {
        const int64_t pos = f.head.positions()[s];
        if (pos == HeadStore::kFree || pos >= f.next - kRecent) continue;
        if (lowest < 0 || score[size_t(pos)] < score[size_t(f.head.positions()[lowest])]) lowest = s;
      }
      f.head.evict(lowest);
    }
    f.head.apply_evictions();
    f.head.settle_kivi();
    most = std::max(most, f.head.capacity());
    ASSERT_EQ(f.head.resident_bytes(), expected_bytes(f.head, KVType::kivi2, KVType::kivi2)) << step;
  }
  EXPECT_LE(most, 2 * (kBudget + 1) + 2 * kGroup);
}

TEST(HeadStoreKivi, Fp16SinksNeverLeaveFp16) {
  Feed f(KVType::kivi2, KVType::kivi2, /*fp16_below=*/3);
  f.add(50, 8);
  std::vector<float> key(kDim), value(kDim);
  for (int s = 0; s < f.head.n_slots(); ++s) {
    const int64_t pos = f.head.positions()[s];
    if (pos >= 3) continue;
    EXPECT_FALSE(f.head.key_quantized(s));
    f.head.load_key(s, key.data());
    f.head.load_value(s, value.data());
    for (int d = 0; d < kDim; ++d) {
      EXPECT_NEAR(key[size_t(d)], f.keys[size_t(pos) * kDim + size_t(d)], 2e-3f);
      EXPECT_NEAR(value[size_t(d)], f.values[size_t(pos) * kDim + size_t(d)], 2e-3f);
    }
  }
  // 3 sinks + the values' residual stay fp16. Keys: 47 wait, so the 6 full groups (slots 0-47, the
  // first holding the sinks in fp16 beside its codes) are quantized; the sinks and slots 48-49 stay.
  EXPECT_EQ(f.head.fp16_values(), 3 + kResidual);
  EXPECT_EQ(f.head.fp16_keys(), 3 + 50 % kGroup);
}

// load_keys_transposed (the prompt's tiles) reads every slot as load_key does, bit for bit: quantized
// groups with held rows, fp16 sinks inside a quantized group, open groups with free slots, and
// ranges that start and end inside groups; and a row format (q8_0) as well.
TEST(HeadStoreKivi, TransposedKeysEqualLoadKey) {
  for (const KVType k : {KVType::kivi2, KVType::kivi4, KVType::q8_0}) {
    Feed f(k, KVType::f16, 2);
    f.add(45, 31);
    f.head.evict(5);
    f.head.evict(40);
    f.head.evict(43);
    f.head.apply_evictions();
    f.add(1, 32);
    const int n = f.head.n_slots();
    std::vector<float> key(kDim);
    for (const auto& [first, count] : {std::pair{0, n}, std::pair{3, 11}, std::pair{13, n - 13}, std::pair{n - 1, 1}}) {
      const size_t ld = size_t(count) + 3;
      std::vector<float> tile(kDim * ld, -7.0f);
      f.head.load_keys_transposed(first, count, tile.data(), ld);
      for (int j = 0; j < count; ++j) {
        f.head.load_key(first + j, key.data());
        for (size_t d = 0; d < kDim; ++d) {
          ASSERT_EQ(tile[d * ld + size_t(j)], key[d]) << to_string(k) << " slot " << first + j << " channel " << d;
        }
      }
    }
  }
}

// The readers equal decoding every row and running the f32 kernels on them.
TEST(HeadStoreKivi, AttentionEqualsDecodeThenAttend) {
  for (const auto& [k, v] : {std::pair{KVType::kivi2, KVType::kivi2}, std::pair{KVType::kivi4, KVType::kivi4},
                             std::pair{KVType::kivi2, KVType::q8_0}}) {
    Feed f(k, v, 2);
    f.add(45, 21);
    f.head.evict(5);
    f.head.evict(40);
    f.head.apply_evictions();
    f.add(2, 22);
    const auto n = size_t(f.head.n_slots());
    std::vector<float> keys(n * kDim), values(n * kDim);
    std::vector<uint8_t> mask(n);
    for (size_t s = 0; s < n; ++s) {
      f.head.load_key(int(s), keys.data() + s * kDim);
      f.head.load_value(int(s), values.data() + s * kDim);
      mask[s] = f.head.live(int(s));
    }
    const size_t n_q = 3, ld = n + 5;
    const std::vector<float> q = test::normal(n_q * kDim, 77);
    std::vector<float> got(n_q * ld), want(n_q * ld);
    ASSERT_TRUE(f.head.key_probs(q.data(), n_q, kDim, n, mask.data(), 0.35f, got.data(), ld));
    ASSERT_TRUE(
        query_probs(q.data(), n_q, kDim, keys.data(), KVType::f32, n, kDim, mask.data(), 0.35f, want.data(), ld));
    for (size_t g = 0; g < n_q; ++g) {
      for (size_t j = 0; j < n; ++j) EXPECT_NEAR(got[g * ld + j], want[g * ld + j], 1e-5f) << g << " " << j;
    }
    std::vector<float> out_got(n_q * kDim, 0.0f), out_want(n_q * kDim, 0.0f);
    f.head.add_weighted_values(want.data(), n_q, ld, n, out_got.data(), kDim);
    rows_weighted_sum_group(want.data(), n_q, ld, values.data(), KVType::f32, n, kDim, out_want.data(), kDim);
    for (size_t i = 0; i < out_got.size(); ++i) EXPECT_NEAR(out_got[i], out_want[i], 1e-5f) << i;
  }
}

}  // namespace
}  // namespace squeezekv
