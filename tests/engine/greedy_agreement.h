// Greedy continuations against llama.cpp's, shared by the real models' agreement tests: each
// prompt is encoded as llama.cpp encoded it, then decoded greedily with a full f32 cache; the
// continuation may part from llama.cpp's only at a step where the two best logits lie within
// kNearTie of each other on either side (said when it happens).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <span>
#include <vector>

#include "squeezekv/engine/engine.h"
#include "squeezekv/methods/kv_cache_config.h"

namespace squeezekv::test {

struct GreedyCase {
  const char* prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;
  std::vector<float> gaps;  // llama.cpp's best logit minus its second best, per step
};

inline constexpr float kNearTie = 1e-3f;

inline void expect_greedy_agrees(Engine& engine, std::span<const GreedyCase> cases) {
  const Model& model = engine.model();
  const int vocab = model.config().vocab;
  for (const GreedyCase& g : cases) {
    SCOPED_TRACE(g.prompt);
    ASSERT_EQ(model.tokenizer().encode(g.prompt, true), g.prompt_ids);
    KVCacheConfig config;
    config.method = "full";
    config.kv_type = KVType::f32;
    auto cache = engine.make_cache(config);
    std::vector<float> logits;
    engine.forward(g.prompt_ids, *cache, Logits::last, logits);
    for (size_t step = 0; step < g.ids.size(); ++step) {
      const auto token = int32_t(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
      if (token != g.ids[step]) {
        std::vector<float> sorted(logits.begin(), logits.begin() + vocab);
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        const float ours = sorted[0] - sorted[1];
        std::printf("%s: parts from llama.cpp at step %zu (%d against %d), gaps %.5f here and %.5f there\n", g.prompt,
                    step, token, g.ids[step], ours, g.gaps[step]);
        EXPECT_TRUE(ours < kNearTie || g.gaps[step] < kNearTie)
            << "step " << step << ": " << token << " against " << g.ids[step];
        break;
      }
      if (step + 1 < g.ids.size()) engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
    }
  }
}

}  // namespace squeezekv::test
