#include "squeezekv/alloc/hidden_cosine_budgets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {

std::vector<int> kmeans_1d(std::span<const double> values, int k) {
  const size_t n = values.size();
  if (n == 0) return {};
  k = std::clamp(k, 1, int(n));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  // Prefix sums of the sorted values give any run's sum of squared deviations in O(1).
  std::vector<double> s(n + 1, 0.0), s2(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    s[i + 1] = s[i] + values[order[i]];
    s2[i + 1] = s2[i] + values[order[i]] * values[order[i]];
  }
  auto cost = [&](size_t i, size_t j) {  // sorted run [i, j)
    const double sum = s[j] - s[i], len = double(j - i);
    return std::max(0.0, (s2[j] - s2[i]) - sum * sum / len);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[g][j]: the least cost of splitting the first j sorted values into g + 1 runs.
  std::vector<std::vector<double>> best(size_t(k), std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> cut(size_t(k), std::vector<size_t>(n + 1, 0));
  for (size_t j = 1; j <= n; ++j) best[0][j] = cost(0, j);
  for (size_t g = 1; g < size_t(k); ++g) {
    for (size_t j = g + 1; j <= n; ++j) {
      for (size_t i = g; i < j; ++i) {
        const double c = best[g - 1][i] + cost(i, j);
        if (c < best[g][j]) {  // strict: the earliest cut wins ties, so the result is fixed
          best[g][j] = c;
          cut[g][j] = i;
        }
      }
    }
  }
  std::vector<int> group(n);
  size_t end = n;
  for (int g = k - 1; g >= 0; --g) {
    const size_t begin = g == 0 ? 0 : cut[size_t(g)][end];
    for (size_t i = begin; i < end; ++i) group[order[i]] = g;
    end = begin;
  }
  return group;
}

std::vector<int> hidden_cosine_budgets(std::span<const double> cosines, int avg_budget, int n_sink, double fraction,
                                       double strength, int max_rows) {
  require(fraction > 0.0 && fraction <= 1.0, "squeeze_fraction", fraction, "must lie in (0, 1]");
  require(strength >= 0.0 && strength <= 1.0, "strength", strength, "must lie in [0, 1]");
  require(n_sink >= 0, "n_sink", n_sink, "must be at least 0");
  require(avg_budget > n_sink, "avg_budget", avg_budget, "must exceed n_sink = " + std::to_string(n_sink));
  for (size_t i = 0; i < cosines.size(); ++i) {
    require(std::isfinite(cosines[i]), "cosines[" + std::to_string(i) + "]", cosines[i], "must be finite");
  }
  const size_t n = cosines.size();
  if (n == 0) return {};
  std::vector<double> raw(n, double(avg_budget));
  if (n >= 2) {
    const std::vector<int> group = kmeans_1d(cosines, 3);
    const int top = *std::max_element(group.begin(), group.end());
    const auto n_top = size_t(std::count(group.begin(), group.end(), top));
    if (n_top < n) {
      const double squeezed = fraction * avg_budget;
      const double rest = (double(n) * avg_budget - double(n_top) * squeezed) / double(n - n_top);
      for (size_t i = 0; i < n; ++i) {
        const double paper = group[i] == top ? squeezed : rest;
        raw[i] = (1.0 - strength) * avg_budget + strength * paper;
      }
    }
  }
  if (max_rows > 0) {
    // Clamp to the sequence length; hand the excess to the layers below it, by their room.
    double excess = 0.0, room = 0.0;
    for (double& b : raw) {
      if (b > max_rows) {
        excess += b - max_rows;
        b = max_rows;
      } else {
        room += max_rows - b;
      }
    }
    const double share = room > 0.0 ? std::min(1.0, excess / room) : 0.0;
    for (double& b : raw) {
      if (b < max_rows) b += (max_rows - b) * share;
    }
  }
  std::vector<int> budgets = floor_and_round(std::move(raw), double(n_sink + 1));
  if (max_rows > n_sink) {
    for (int& b : budgets) b = std::min(b, std::max(max_rows, n_sink + 1));
  }
  return budgets;
}

}  // namespace squeezekv
