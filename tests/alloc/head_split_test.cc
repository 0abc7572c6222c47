#include "squeezekv/alloc/head_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct TestHead {
  std::vector<int64_t> positions;  // -1: free
  std::vector<float> priority;
};

std::vector<HeadPriorities> views(const std::vector<TestHead>& heads) {
  std::vector<HeadPriorities> out;
  for (const TestHead& h : heads) out.push_back({h.positions.data(), h.priority.data(), int(h.positions.size())});
  return out;
}

// The oracle: one row at a time, the lowest (priority, position, head) row that is unprotected and
// whose head holds more than the floor goes, until the layer holds layer_rows or none can go.
std::vector<std::vector<int>> greedy_evictions(const std::vector<TestHead>& heads, int64_t layer_rows, int floor) {
  std::vector<std::vector<bool>> live(heads.size());
  std::vector<int> count(heads.size(), 0);
  int64_t total = 0;
  for (size_t h = 0; h < heads.size(); ++h) {
    for (int64_t p : heads[h].positions) live[h].push_back(p >= 0);
    count[h] = int(std::count(live[h].begin(), live[h].end(), true));
    total += count[h];
  }
  std::vector<std::vector<int>> evicted(heads.size());
  while (total > layer_rows) {
    int best_h = -1, best_s = -1;
    for (size_t h = 0; h < heads.size(); ++h) {
      if (count[h] <= floor) continue;
      for (size_t s = 0; s < heads[h].positions.size(); ++s) {
        if (!live[h][s] || heads[h].priority[s] == kInf) continue;
        if (best_h < 0) {
          best_h = int(h), best_s = int(s);
          continue;
        }
        const float p = heads[h].priority[s], bp = heads[size_t(best_h)].priority[size_t(best_s)];
        const int64_t q = heads[h].positions[s], bq = heads[size_t(best_h)].positions[size_t(best_s)];
        // Heads are scanned in order, so on a full tie the earlier (lower) head stays best.
        if (p < bp || (p == bp && q < bq)) best_h = int(h), best_s = int(s);
      }
    }
    if (best_h < 0) break;
    live[size_t(best_h)][size_t(best_s)] = false;
    evicted[size_t(best_h)].push_back(best_s);
    --count[size_t(best_h)];
    --total;
  }
  for (auto& e : evicted) std::sort(e.begin(), e.end());
  return evicted;
}

// Random heads: shuffled slots with some free, scores from a small set (ties), some protected.
std::vector<TestHead> random_heads(std::mt19937& rng, int n_heads) {
  std::vector<TestHead> heads(static_cast<size_t>(n_heads));
  const int n_positions = std::uniform_int_distribution<int>(0, 40)(rng);
  const bool few_scores = rng() % 2 == 0;
  for (TestHead& h : heads) {
    const int n_slots = n_positions + std::uniform_int_distribution<int>(0, 5)(rng);
    h.positions.assign(static_cast<size_t>(n_slots), -1);
    h.priority.assign(size_t(n_slots), 0.0f);
    std::vector<int> slots(static_cast<size_t>(n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    for (int p = 0; p < n_positions; ++p) {
      if (rng() % 6 == 0) continue;  // evicted earlier: positions need not be contiguous
      const auto s = size_t(slots[size_t(p)]);
      h.positions[s] = p;
      h.priority[s] = few_scores ? float(rng() % 4) : std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
      if (rng() % 7 == 0) h.priority[s] = kInf;
    }
  }
  return heads;
}

TEST(HeadSplit, MatchesGreedyOracleOnRandomHeads) {
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    const int n_heads = std::uniform_int_distribution<int>(1, 6)(rng);
    const std::vector<TestHead> heads = random_heads(rng, n_heads);
    const int budget = std::uniform_int_distribution<int>(1, 30)(rng);
    const double share = seed % 3 == 0 ? 0.0 : std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const int floor = head_floor_rows(share, budget);
    const int64_t layer_rows = int64_t(n_heads) * budget;
    const HeadSplit split = split_heads(views(heads), layer_rows, floor);
    const auto expected = greedy_evictions(heads, layer_rows, floor);
    ASSERT_EQ(split.evict, expected) << "seed " << seed;
    for (size_t h = 0; h < heads.size(); ++h) {
      const auto live =
          int(std::count_if(heads[h].positions.begin(), heads[h].positions.end(), [](int64_t p) { return p >= 0; }));
      ASSERT_EQ(split.kept[h], live - int(expected[h].size())) << "seed " << seed;
    }
  }
}

TEST(HeadSplit, KeepsTheLayerBudgetWhenFloorsAllowIt) {
  for (uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed);
    const int n_heads = std::uniform_int_distribution<int>(1, 6)(rng);
    std::vector<TestHead> heads = random_heads(rng, n_heads);
    for (TestHead& h : heads) std::replace(h.priority.begin(), h.priority.end(), kInf, 0.5f);
    const int budget = std::uniform_int_distribution<int>(1, 20)(rng);
    const HeadSplit split = split_heads(views(heads), int64_t(n_heads) * budget, head_floor_rows(0.2, budget));
    int64_t live = 0;
    for (const TestHead& h : heads)
      live += std::count_if(h.positions.begin(), h.positions.end(), [](int64_t p) { return p >= 0; });
    // Floors of 0.2 B never bind the layer: it holds exactly H x B once it has that many rows.
    EXPECT_EQ(std::accumulate(split.kept.begin(), split.kept.end(), int64_t(0)),
              std::min(live, int64_t(n_heads) * budget))
        << "seed " << seed;
  }
}

TEST(HeadSplit, HeadWithTheLowestScoresKeepsItsFloor) {
  // Head 0's rows all score below head 1's: it still keeps ceil(0.2 * 10) = 2, its best two.
  TestHead low, high;
  for (int p = 0; p < 20; ++p) {
    low.positions.push_back(p);
    low.priority.push_back(float(p % 5) * 0.01f);  // best: positions 4, 9, 14, 19 (0.04), the newest kept
    high.positions.push_back(p);
    high.priority.push_back(1.0f + float(p));
  }
  const std::vector<TestHead> heads = {low, high};
  const HeadSplit split = split_heads(views(heads), 20, head_floor_rows(0.2, 10));
  EXPECT_EQ(split.kept, (std::vector<int>{2, 18}));
  std::vector<int> low_kept;
  for (int s = 0; s < 20; ++s) {
    if (!std::binary_search(split.evict[0].begin(), split.evict[0].end(), s)) low_kept.push_back(s);
  }
  EXPECT_EQ(low_kept, (std::vector<int>{14, 19}));
  EXPECT_EQ(split.evict[1], (std::vector<int>{0, 1}));
  // Floor 0: head 0 loses everything; floor 1: each head keeps exactly its budget (uniform).
  EXPECT_EQ(split_heads(views(heads), 20, 0).kept, (std::vector<int>{0, 20}));
  EXPECT_EQ(split_heads(views(heads), 20, head_floor_rows(1.0, 10)).kept, (std::vector<int>{10, 10}));
}

TEST(HeadSplit, ProtectedRowsAlwaysStayAndCountForTheirHead) {
  TestHead a{{0, 1, 2, 3}, {kInf, kInf, kInf, 0.0f}};
  TestHead b{{0, 1, 2, 3}, {5.0f, 6.0f, 7.0f, 8.0f}};
  const std::vector<TestHead> heads = {a, b};
  const HeadSplit split = split_heads(views(heads), 4, 0);
  EXPECT_EQ(split.kept, (std::vector<int>{3, 1}));
  EXPECT_EQ(split.evict[0], std::vector<int>{3});
  EXPECT_EQ(split.evict[1], (std::vector<int>{0, 1, 2}));
  // Protected rows beyond the layer's rows: all stay, everything else goes.
  EXPECT_EQ(split_heads(views(heads), 2, 0).kept, (std::vector<int>{3, 0}));
}

TEST(HeadSplit, TiesGoToTheOlderPositionThenTheLowerHead) {
  TestHead a{{3, 1}, {1.0f, 1.0f}};
  TestHead b{{1, 2}, {1.0f, 1.0f}};
  const std::vector<TestHead> heads = {a, b};
  HeadSplit split = split_heads(views(heads), 3, 0);  // position 1 of head 0 goes first
  EXPECT_EQ(split.evict[0], std::vector<int>{1});
  EXPECT_TRUE(split.evict[1].empty());
  split = split_heads(views(heads), 2, 0);  // then position 1 of head 1
  EXPECT_EQ(split.evict[1], std::vector<int>{0});
}

TEST(HeadSplit, FloorRowsAndErrors) {
  EXPECT_EQ(head_floor_rows(0.2, 10), 2);
  EXPECT_EQ(head_floor_rows(0.3, 10), 3);
  EXPECT_EQ(head_floor_rows(0.2, 11), 3);
  EXPECT_EQ(head_floor_rows(0.0, 11), 0);
  EXPECT_EQ(head_floor_rows(1.0, 11), 11);
  EXPECT_THROW(head_floor_rows(1.5, 10), InvalidArgument);
  EXPECT_THROW(head_floor_rows(-0.1, 10), InvalidArgument);
  EXPECT_THROW(split_heads({}, -1, 0), InvalidArgument);
  EXPECT_TRUE(split_heads({}, 0, 0).kept.empty());
}

}  // namespace
}  // namespace squeezekv
