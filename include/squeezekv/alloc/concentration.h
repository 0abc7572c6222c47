// concentration_score: how concentrated a layer's keys are in direction — the mean off-diagonal
// cosine similarity of the keys, computed in O(n * D) as (||sum u||^2 - sum ||u||^2) / (n (n - 1))
// with u_j = k_j / (||k_j|| + 1e-8). 1 for identical directions, 0 for orthogonal, scale-invariant;
// 0 for fewer than two rows.
#pragma once

namespace squeezekv {

// keys: [n, head_dim] f32, contiguous.
double concentration_score(const float* keys, int n, int head_dim);

// Mean over heads of [n_heads, n, head_dim] keys.
double concentration_score(const float* keys, int n_heads, int n, int head_dim);

// The O(n^2 * D) pairwise definition, kept as the test oracle and the benchmark baseline.
double concentration_score_pairwise(const float* keys, int n, int head_dim);

}  // namespace squeezekv
