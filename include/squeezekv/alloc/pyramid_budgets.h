// PyramidKV's fixed linear taper (docs/semantics.md, section 7): the most rows to the first layer, the
// fewest to the last, mean exactly `avg`.
#pragma once

#include <vector>

namespace squeezekv {

// floor = n_sink + 1; span = (avg - floor) * (beta - 1); v_i from avg + span down to avg - span;
// clamped to the floor with the excess water-filled back, rounded to sum exactly L * avg.
// L 12, avg 512, n_sink 4, beta 2 gives [1019, 927, 835, 742, 650, 558, 466, 374, 282, 189, 97, 5].
std::vector<int> pyramid_budgets(int n_layers, int avg_budget, int n_sink, double beta);

}  // namespace squeezekv
