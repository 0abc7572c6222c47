// Positions inside the cache at the store level (docs/positions.md): a kept row's shift counts the
// rows of lower position evicted since it was stored, so rank at insertion - shift is its rank
// among the rows the head holds now.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "squeezekv/cache/layer_cache.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/ops/model_ops.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::map<int64_t, int32_t> shift_by_position(const HeadStore& head) {
  std::map<int64_t, int32_t> out;
  for (int s = 0; s < head.n_slots(); ++s) {
    if (head.live(s)) out[head.positions()[s]] = head.shifts()[s];
  }
  return out;
}

void append(HeadStore& head, int n, int64_t first_pos) {
  const std::vector<float> rows = test::normal(size_t(n) * size_t(head.head_dim()), uint64_t(first_pos) + 1);
  std::vector<int> slots;
  head.append(rows.data(), rows.data(), n, first_pos, 0, slots);
}

int slot_of(const HeadStore& head, int64_t pos) {
  for (int s = 0; s < head.n_slots(); ++s) {
    if (head.positions()[s] == pos) return s;
  }
  return -1;
}

TEST(HeadStoreShift, CountsEvictedRowsOfLowerPosition) {
  HeadStore head(4, KVType::f16);
  append(head, 10, 0);
  for (int64_t p : {2, 5, 7}) head.evict(slot_of(head, p));
  EXPECT_TRUE(head.evictions_pending());
  head.apply_evictions();
  EXPECT_FALSE(head.evictions_pending());
  const std::map<int64_t, int32_t> want = {{0, 0}, {1, 0}, {3, 1}, {4, 1}, {6, 2}, {8, 3}, {9, 3}};
  EXPECT_EQ(shift_by_position(head), want);
  EXPECT_EQ(head.max_shift(), 3);
}

TEST(HeadStoreShift, NewRowsStartAtZeroAndShiftsSurviveCompaction) {
  HeadStore head(4, KVType::f32);
  append(head, 6, 0);
  head.evict(slot_of(head, 1));
  // The append reuses the freed slot and folds the pending eviction in first: the new rows come
  // after it and must not count it.
  append(head, 2, 6);
  std::map<int64_t, int32_t> want = {{0, 0}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 0}, {7, 0}};
  EXPECT_EQ(shift_by_position(head), want);
  head.evict(slot_of(head, 0));
  head.evict(slot_of(head, 7));  // the newest: nothing above it moves
  head.apply_evictions();
  want = {{2, 2}, {3, 2}, {4, 2}, {5, 2}, {6, 1}};
  EXPECT_EQ(shift_by_position(head), want);
  head.compact(head.n_live());
  EXPECT_EQ(shift_by_position(head), want);
  EXPECT_EQ(head.max_shift(), 2);
  head.clear();
  EXPECT_EQ(head.max_shift(), 0);
  EXPECT_FALSE(head.evictions_pending());
}

TEST(HeadStoreShift, EvictingOnlyTheNewestLeavesEveryShiftZero) {
  HeadStore head(2, KVType::f16);
  append(head, 5, 0);
  head.evict(slot_of(head, 4));
  head.evict(slot_of(head, 3));
  head.apply_evictions();
  EXPECT_EQ(head.max_shift(), 0);
}

// Property on random streams: through a LayerCache with sinks and per-head evictions (h2o scores
// rows per head), every kept row's rank at insertion minus its shift equals the number of rows of
// lower position its head holds; sinks keep shift 0.
TEST(HeadStoreShift, RankAtInsertionMinusShiftIsTheRankNow) {
  for (const char* method : {"h2o", "streaming", "tova", "chunkkv"}) {
    SCOPED_TRACE(method);
    KVCacheConfig c;
    c.method = method;
    c.head_dim = 8;
    c.budget = 12;
    c.n_sink = 3;
    auto cache = KVCacheFactory::create(c, 3);  // 3 KV heads
    std::mt19937 rng(7);
    std::vector<std::map<int64_t, int64_t>> rank_at_insertion(3);
    int64_t pos = 0;
    for (int step = 0; step < 40; ++step) {
      const int n = 1 + int(rng() % 14);  // 1 to 14 evictions a step: one alone and several are counted apart
      for (int h = 0; h < 3; ++h) {
        for (int t = 0; t < n; ++t) rank_at_insertion[size_t(h)][pos + t] = cache->head(h).n_live() + t;
      }
      const std::vector<float> k = test::normal(size_t(3 * n * 8), uint64_t(step) * 2 + 1);
      const std::vector<float> v = test::normal(size_t(3 * n * 8), uint64_t(step) * 2 + 2);
      cache->update(k.data(), v.data(), n);
      pos += n;
      for (int h = 0; h < 3; ++h) {
        const HeadStore& head = cache->head(h);
        ASSERT_FALSE(head.evictions_pending());
        const std::vector<int> order = head.slots_by_position();
        for (size_t rank = 0; rank < order.size(); ++rank) {
          const int64_t p = head.positions()[order[rank]];
          const int32_t shift = head.shifts()[order[rank]];
          EXPECT_EQ(rank_at_insertion[size_t(h)][p] - shift, int64_t(rank)) << "head " << h << " position " << p;
          if (p < c.n_sink) {
            EXPECT_EQ(shift, 0);
          }
        }
      }
    }
  }
}

// The engine's read-time correction: a key stored rotated by its rank at insertion r, turned back
// by its shift s with the same table, equals the key rotated by r - s (to float rounding).
TEST(HeadStoreShift, InverseRotationByTheShiftGivesTheRankNow) {
  for (RopeStyle style : {RopeStyle::normal, RopeStyle::neox}) {
    const std::vector<float> raw = test::normal(16, 3);
    for (int64_t r : {5, 100, 511, 4000}) {
      for (int64_t s : {int64_t{1}, int64_t{3}, int64_t{64}, r}) {
        std::vector<float> stored = raw, want = raw, cs(16);
        rope(stored.data(), r, 16, 10000.0f, style);
        rope(want.data(), r - s, 16, 10000.0f, style);
        rope_cache(s, 16, 10000.0f, cs.data());
        rope_apply_inverse(stored.data(), 16, style, cs.data());
        for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(stored[i], want[i], 2e-3) << "r " << r << " s " << s;
      }
    }
  }
}

// Clamped distances (PositionRule::span): rows up to a position turn to RoPE position 0 in place,
// each once; later rows and values are untouched.
TEST(HeadStoreOrigin, TurnsKeysUpToAPositionBackToZeroOnce) {
  constexpr int kDim = 8, kRot = 8;
  const float base = 10000.0f;
  HeadStore head(kDim, KVType::f32);
  append(head, 12, 0);
  head.evict(slot_of(head, 3));
  head.apply_evictions();
  std::vector<float> before(size_t(head.n_slots()) * kDim), values(before.size());
  load_rows(head.keys(), KVType::f32, before.data(), before.size());
  load_rows(head.values(), KVType::f32, values.data(), values.size());
  EXPECT_EQ(head.origin_upto(), -1);
  head.rotate_keys_to_origin(6, kRot, RopeStyle::normal, base);
  head.rotate_keys_to_origin(4, kRot, RopeStyle::normal, base);  // never moves back
  EXPECT_EQ(head.origin_upto(), 6);
  std::vector<float> after(before.size()), cos_sin(kRot);
  load_rows(head.keys(), KVType::f32, after.data(), after.size());
  for (int s = 0; s < head.n_slots(); ++s) {
    if (!head.live(s)) continue;
    const int64_t p = head.positions()[s];
    SCOPED_TRACE(p);
    EXPECT_EQ(head.at_origin(s), p <= 6);
    std::vector<float> want(before.begin() + s * kDim, before.begin() + (s + 1) * kDim);
    if (p <= 6) {
      rope_cache(p, kRot, base, cos_sin.data());
      rope_apply_inverse(want.data(), kRot, RopeStyle::normal, cos_sin.data());
    }
    for (int i = 0; i < kDim; ++i) EXPECT_EQ(after[size_t(s * kDim + i)], want[size_t(i)]);
  }
  // A second call up to a later position turns only the rows it newly reaches.
  head.rotate_keys_to_origin(8, kRot, RopeStyle::normal, base);
  std::vector<float> again(before.size());
  load_rows(head.keys(), KVType::f32, again.data(), again.size());
  for (int s = 0; s < head.n_slots(); ++s) {
    const int64_t p = head.positions()[s];
    if (p == HeadStore::kFree) continue;
    std::vector<float> want(after.begin() + s * kDim, after.begin() + (s + 1) * kDim);
    if (p == 7 || p == 8) {
      rope_cache(p, kRot, base, cos_sin.data());
      rope_apply_inverse(want.data(), kRot, RopeStyle::normal, cos_sin.data());
    }
    for (int i = 0; i < kDim; ++i) EXPECT_EQ(again[size_t(s * kDim + i)], want[size_t(i)]) << p;
  }
  std::vector<float> values_after(values.size());
  load_rows(head.values(), KVType::f32, values_after.data(), values_after.size());
  EXPECT_EQ(values_after, values);
  head.clear();
  EXPECT_EQ(head.origin_upto(), -1);
}

}  // namespace
}  // namespace squeezekv
