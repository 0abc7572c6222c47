// The squeeze allocator's schedule (docs/semantics.md, section 5): budget follows the inverse of each
// layer's measured concentration, with the total conserved exactly.
#pragma once

#include <span>
#include <vector>

namespace squeezekv {

// budget_i = avg * ((1 - s) + s * w_i), w_i = (1 - c_i) * L / sum(1 - c), c clamped to [0, 1];
// floored at n_sink + 1 with the excess taken back from the other layers in proportion to their
// headroom, then rounded by largest remainder so the budgets sum to exactly L * avg.
// Throws InvalidArgument for strength outside [0, 1], avg <= n_sink, n_sink < 0 or NaN input.
std::vector<int> squeeze_budgets(std::span<const double> concentrations, int avg_budget, int n_sink, double strength);

// Shared by the allocators: clamp `values` to at least `floor`, take the excess back from the
// unclamped entries in proportion to their headroom above the floor (total preserved), then round
// by largest remainder (ties to the lower index) so the result sums to round(sum(values)).
std::vector<int> floor_and_round(std::vector<double> values, double floor);

}  // namespace squeezekv
