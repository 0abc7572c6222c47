// The synthetic sweep's row accounting: a schedule that gives layers more rows than the prompt has
// is conserved, so the layers hold the whole promise and nothing is wasted.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "squeezekv/eval/synth.h"

namespace squeezekv {
namespace {

TEST(Synth, SchedulesBeyondThePromptAreConservedAndNothingIsWasted) {
  for (const char* method : {"squeeze", "pyramidkv"}) {
    SynthOptions options;
    options.layers = {12};
    options.seq_lens = {200};
    options.budgets = {128};
    options.strengths = {1.0};
    options.base.method = method;
    options.base.head_dim = 32;
    options.kv_heads = 2;
    const std::vector<SynthResult> results = run_synth(options);
    ASSERT_EQ(results.size(), 1u) << method;
    const SynthResult& r = results[0];
    ASSERT_EQ(r.schedule.size(), 12u);
    // The case is only a test if the schedule asks some layer for more rows than it has seen.
    EXPECT_GT(*std::max_element(r.schedule.begin(), r.schedule.end()), 200) << method;
    EXPECT_EQ(r.scheduled_rows, 12 * 128) << method;
    EXPECT_EQ(r.held_rows, 12 * 128) << method;
    EXPECT_EQ(r.wasted_rows, 0) << method;
    EXPECT_EQ(std::accumulate(r.held_budgets.begin(), r.held_budgets.end(), int64_t(0)), 12 * 128) << method;
    for (const int b : r.held_budgets) EXPECT_LE(b, 200) << method;
  }
}

}  // namespace
}  // namespace squeezekv
