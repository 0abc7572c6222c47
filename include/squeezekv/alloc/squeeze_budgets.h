// The squeeze allocator's schedule (docs/semantics.md, section 5): budget follows the inverse of each
// layer's measured concentration, with the total conserved exactly.
#pragma once

#include <span>
#include <vector>

namespace squeezekv {

// The largest average budget any caller may ask for (the command line's, the C API's and Python's
// alike): 2^30 - 1 rows, so that sums over layers and budget + chunk stay far from int overflow.
inline constexpr int kMaxAvgBudget = (1 << 30) - 1;

// budget_i = avg * ((1 - s) + s * w_i), w_i = (1 - c_i) * L / sum(1 - c), c clamped to [0, 1];
// floored at n_sink + 1 with the excess taken back from the other layers in proportion to their
// headroom, then rounded by largest remainder so the budgets sum to exactly L * avg.
// Throws InvalidArgument for strength outside [0, 1], avg <= n_sink or above kMaxAvgBudget,
// n_sink < 0, NaN input, or a layer budget beyond an int.
std::vector<int> squeeze_budgets(std::span<const double> concentrations, int avg_budget, int n_sink, double strength);

// InvalidArgument naming avg_budget unless n_sink < avg_budget <= kMaxAvgBudget.
void require_avg_budget(int avg_budget, int n_sink);

// Shared by the allocators: clamp `values` to at least `floor`, take the excess back from the
// unclamped entries in proportion to their headroom above the floor (total preserved), then round
// by largest remainder (ties to the lower index) so the result sums to round(sum(values)).
// InvalidArgument (naming avg_budget) when an entry would not fit an int.
std::vector<int> floor_and_round(std::vector<double> values, double floor);

}  // namespace squeezekv
