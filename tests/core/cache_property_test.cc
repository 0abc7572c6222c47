// Every registered method driven by random API call sequences (update, begin/add_attention/end,
// reset of the model and of one layer, fetch), with the cache's invariants checked after each
// call: the budget holds once final, sinks are kept, and the accounting is consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kivi_rows.h"
#include "squeezekv/ops/kv_format.h"
#include "test_util.h"

namespace squeezekv {
namespace {

constexpr int kLayers = 3, kHeads = 2, kDim = 8, kBudget = 12, kSinks = 2;

struct Model {
  std::unique_ptr<ModelCache> cache;
  std::vector<int64_t> seen;  // tokens appended since each layer's last reset
};

// Policies that never evict a sink once the budget is final.
bool keeps_sinks(const std::string& policy) {
  return policy == "cumulative" || policy == "streaming" || policy == "knorm" || policy == "chunked" ||
         policy == "tova" || policy == "full";
}

void check_layer(const LayerCache& layer, int64_t seen, const std::string& policy, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_EQ(layer.tokens_seen(), seen);
  int most = 0;
  for (int h = 0; h < layer.n_heads(); ++h) {
    const FetchedRows rows = layer.fetch(h);
    const int live = layer.tokens_kept(h);
    most = std::max(most, live);
    ASSERT_EQ(rows.positions.size(), size_t(live));
    ASSERT_EQ(rows.keys.size(), size_t(live) * kDim);
    ASSERT_TRUE(std::is_sorted(rows.positions.begin(), rows.positions.end()));
    ASSERT_EQ(std::set<int64_t>(rows.positions.begin(), rows.positions.end()).size(), rows.positions.size());
    for (int64_t p : rows.positions) ASSERT_TRUE(p >= 0 && p < seen) << p;
    // Under the adakv head split a head may hold more than the budget; its sequence's heads
    // together never more than heads x budget (checked below).
    if (layer.budget_final() && layer.policy().bounded() && layer.head_split() == HeadSplitRule::uniform) {
      ASSERT_LE(live, layer.layer_budget()) << "head " << h;
    }
    if (layer.budget_final() && keeps_sinks(policy)) {
      for (int64_t s = 0; s < std::min<int64_t>(kSinks, seen); ++s) {
        ASSERT_TRUE(std::binary_search(rows.positions.begin(), rows.positions.end(), s)) << "sink " << s;
      }
    }
    if (!layer.budget_final()) {
      ASSERT_EQ(live, seen);  // nothing evicted before the schedule
    }
  }
  ASSERT_EQ(layer.tokens_kept(), most);
  if (layer.budget_final() && layer.policy().bounded() && layer.head_split() != HeadSplitRule::uniform) {
    const int n_kv = layer.rows().n_kv_heads;
    for (int first = 0; first < layer.n_heads(); first += n_kv) {
      int64_t held = 0;
      for (int h = first; h < first + n_kv; ++h) held += layer.tokens_kept(h);
      ASSERT_LE(held, int64_t(n_kv) * layer.layer_budget()) << "sequence from head " << first;
    }
  }
  // Resident bytes are exactly what the heads allocated: capacity rows of each format (KIVI: whole
  // key groups of codes, per-row value codes, and the fp16 pools).
  const KVCacheConfig& c = layer.config();
  const KVType kt = c.key_type(), vt = c.value_type();
  const auto G = size_t(c.kivi_group);
  if (!kv_kivi(kt) && !kv_kivi(vt)) {
    const size_t row = kv_row_bytes(kt, kDim) + kv_row_bytes(vt, kDim);
    ASSERT_EQ(layer.full_bytes(), size_t(layer.n_heads()) * size_t(seen) * row);
    ASSERT_GE(layer.kept_bytes(), size_t(most) * row);
  }
  ASSERT_EQ(layer.full_bytes(), size_t(layer.n_heads()) * size_t(seen) * kv_token_bytes(c));
  size_t allocated = 0;
  for (int h = 0; h < layer.n_heads(); ++h) {
    const HeadStore& head = layer.head(h);
    const auto cap = size_t(head.capacity());
    allocated += kv_kivi(kt) ? cap / G * kivi_key_group_bytes(kivi_bits(kt), G, kDim) : cap * kv_row_bytes(kt, kDim);
    allocated += cap * (kv_kivi(vt) ? kivi_value_row_bytes(kivi_bits(vt), G, kDim) : kv_row_bytes(vt, kDim));
    allocated += head.fp16_bytes();
    if (kv_kivi(kt)) {
      ASSERT_EQ(cap % G, 0u);
    }
    ASSERT_LE(head.n_live() + head.held(), head.capacity());
    // The fp16 pools hold about the residual: at most it, a group waiting to fill, the sinks and
    // the update's rows (40 at most here), plus 8 free rows.
    const int fp16_cap = c.kivi_residual + c.kivi_group + kSinks + 40;
    ASSERT_LE(head.fp16_keys(), std::max(fp16_cap, head.n_live()));
    ASSERT_LE(head.fp16_bytes(), size_t(head.fp16_keys() + head.fp16_values() + 16) * kDim * 2);
  }
  ASSERT_EQ(layer.kept_bytes(), allocated);
}

void run_sequence(const MethodInfo& method, const std::string& score, uint64_t seed, const char* k_type = "auto",
                  const char* v_type = "auto", std::string_view policy_id = {}, std::string_view allocator_id = {}) {
  KVCacheConfig config;
  config.policy = std::string(policy_id);
  config.allocator = std::string(allocator_id);
  config.set("k_type", k_type);
  config.set("v_type", v_type);
  config.method = std::string(method.id);
  config.budget = kBudget;
  config.n_sink = kSinks;
  config.head_dim = kDim;
  if (reads_param(config, "kivi_group") && config.policy != "full" && method.policy != "full") {
    config.kivi_group = 8;  // groups and a residual that fit the budget, so codes form and rows are held
    config.kivi_residual = 8;
    // A residual of at most half the budget (KIVI that compresses nothing is refused: core/kivi_storage.cc).
    if (kv_kivi(config.key_type()) || kv_kivi(config.value_type())) config.budget = 2 * config.kivi_residual;
  }
  if (reads_param(config, "score")) config.set("score", score);
  if (reads_param(config, "window")) config.set("window", "4");
  if (reads_param(config, "chunk_size")) config.set("chunk_size", "3");
  Model m{KVCacheBuilder::for_model(kLayers, config, kHeads), std::vector<int64_t>(kLayers, 0)};
  const std::string policy = resolved_policy(config);
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return int(rng() % uint64_t(n)); };
  for (int step = 0; step < 300; ++step) {
    const int op = pick(100), l = pick(kLayers);
    LayerCache& layer = m.cache->layer(l);
    const std::string where = std::string(method.id) + " " + config.policy + "/" + config.allocator + " " + score +
                              " " + k_type + "/" + v_type + " seed " + std::to_string(seed) + " step " +
                              std::to_string(step) + " op " + std::to_string(op) + " layer " + std::to_string(l);
    if (op < 3) {
      m.cache->reset();
      std::fill(m.seen.begin(), m.seen.end(), 0);
    } else if (op < 6) {
      layer.reset();
      m.seen[size_t(l)] = 0;
    } else if (op < 12) {
      (void)layer.fetch(pick(kHeads));
    } else {
      const int n = op < 20 ? 1 + pick(40) : 1 + pick(3);
      const std::vector<float> k = test::normal(size_t(kHeads) * size_t(n) * kDim, rng());
      const std::vector<float> v = test::normal(k.size(), rng());
      if (op % 2 == 0 || !layer.wants_attention()) {
        layer.update(k.data(), v.data(), n);
      } else {
        layer.begin_update(k.data(), v.data(), n);
        for (int h = 0; h < kHeads; ++h) {
          const int slots = layer.head(h).n_slots();
          std::vector<float> probs(size_t(n) * size_t(slots), 0.0f);
          for (float& p : probs) p = float(rng() % 1000) / 1000.0f;
          layer.add_attention(h, probs.data(), n);
        }
        layer.end_update();
      }
      m.seen[size_t(l)] += n;
    }
    for (int i = 0; i < kLayers; ++i) {
      check_layer(m.cache->layer(i), m.seen[size_t(i)], policy, where + " checking layer " + std::to_string(i));
      if (testing::Test::HasFatalFailure()) return;
    }
    // Once final, a measured schedule conserves the total and every layer has its budget.
    if (const BudgetCoordinator* c = m.cache->coordinator(); c && c->is_final()) {
      for (int i = 0; i < kLayers; ++i) ASSERT_TRUE(m.cache->layer(i).budget_final()) << where << " layer " << i;
      const std::vector<int> b = c->budgets();
      int total = 0;
      for (int x : b) total += x;
      ASSERT_EQ(total, kLayers * config.budget) << where;
    }
  }
}

TEST(CacheProperties, EveryMethodKeepsItsInvariantsUnderRandomCallSequences) {
  for (const MethodInfo& method : all_methods()) {
    for (const char* score : {"key-proxy", "attention"}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        run_sequence(method, score, seed);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The storage axis: every policy x allocator with quantized keys and values, alike and apart,
// keeps the same row promise and reports its bytes exactly.
TEST(CacheProperties, EveryPolicyAndAllocatorKeepsItsInvariantsWithQuantizedStorage) {
  const std::pair<const char*, const char*> kTypes[] = {{"q8_0", "q8_0"}, {"q4_0", "q4_0"},   {"q8_0", "q4_0"},
                                                        {"f16", "q4_0"},  {"kivi2", "kivi2"}, {"kivi4", "f16"},
                                                        {"f16", "kivi4"}, {"kivi2", "q8_0"}};
  const MethodInfo& base = find_method("h2o");
  for (const PolicyInfo* p : all_policies()) {
    for (const AllocatorInfo* a : all_allocators()) {
      if ((p->id == "full") != (a->id == "none") || (a->ranks_globally && !p->ranks_across_layers)) continue;
      for (const auto& [k, v] : kTypes) {
        run_sequence(base, "attention", 7, k, v, p->id, a->id);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace squeezekv
