// SqueezeAttention's own allocator (Wang et al. 2024, arXiv:2404.04793, docs/semantics.md, section 6):
// each layer's importance is the mean cosine between the residual stream entering it and after its
// attention add, measured over the prompt; a high cosine means attention changed little. The layers
// are clustered into 3 groups by 1-D k-means; the highest-cosine group gets `fraction * avg` rows
// each and the other layers share the rest equally, so the total stays L * avg.
#pragma once

#include <span>
#include <vector>

namespace squeezekv {

// Exact 1-D k-means (dynamic programming over the sorted values, minimising the within-group sum
// of squares): deterministic, unlike seeded Lloyd iterations. Returns each value's group, groups
// numbered 0..k-1 in increasing order of their values; k is capped at the number of values.
std::vector<int> kmeans_1d(std::span<const double> values, int k);

// The paper's schedule, blended toward uniform by `strength` (1 = the paper, 0 = uniform):
// floored at n_sink + 1, clamped to max_rows when max_rows > 0 (the sequence length: a layer can
// not hold more rows than tokens exist; the excess goes to the other layers while they have
// room), and rounded so the budgets sum to exactly L * avg unless the clamp makes that impossible.
// Throws InvalidArgument for fraction outside (0, 1], strength outside [0, 1], avg <= n_sink, NaN.
std::vector<int> hidden_cosine_budgets(std::span<const double> cosines, int avg_budget, int n_sink, double fraction,
                                       double strength = 1.0, int max_rows = 0);

}  // namespace squeezekv
