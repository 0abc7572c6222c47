#include "squeezekv/alloc/squeeze_budgets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "squeezekv/base/errors.h"

namespace squeezekv {

std::vector<int> floor_and_round(std::vector<double> values, double floor) {
  const size_t n = values.size();
  double excess = 0.0, headroom = 0.0;
  for (double v : values) {
    if (v < floor) excess += floor - v;
    else headroom += v - floor;
  }
  // Taking the excess in proportion to headroom never pushes an entry below the floor, so one
  // pass suffices: v' = floor + (v - floor) * (1 - excess / headroom).
  const double keep = headroom > 0.0 ? std::max(0.0, 1.0 - excess / headroom) : 0.0;
  for (double& v : values) v = v < floor ? floor : floor + (v - floor) * keep;

  for (double v : values) {
    require(v + 1.0 <= double(std::numeric_limits<int>::max()), "layer budget", std::llround(v),
            "beyond a 32-bit int (lower avg_budget, or the strength or beta that spreads it)");
  }
  const double total = std::accumulate(values.begin(), values.end(), 0.0);
  const auto target = static_cast<long long>(std::llround(total));
  std::vector<int> out(n);
  long long assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<int>(std::floor(values[i]));
    assigned += out[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return values[a] - std::floor(values[a]) > values[b] - std::floor(values[b]);
  });
  for (size_t k = 0; assigned < target && k < n; ++k, ++assigned) ++out[order[k]];
  return out;
}

void require_avg_budget(int avg_budget, int n_sink) {
  require(avg_budget > n_sink, "avg_budget", avg_budget, "must exceed n_sink = " + std::to_string(n_sink));
  require(avg_budget <= kMaxAvgBudget, "avg_budget", avg_budget,
          "must be at most " + std::to_string(kMaxAvgBudget) + " rows");
}

std::vector<int> squeeze_budgets(std::span<const double> concentrations, int avg_budget, int n_sink, double strength) {
  require(strength >= 0.0 && strength <= 1.0, "strength", strength, "must lie in [0, 1]");
  require(n_sink >= 0, "n_sink", n_sink, "must be at least 0");
  require_avg_budget(avg_budget, n_sink);
  for (size_t i = 0; i < concentrations.size(); ++i) {
    require(!std::isnan(concentrations[i]), "concentrations[" + std::to_string(i) + "]", concentrations[i],
            "must be a number");
  }
  const size_t n_layers = concentrations.size();
  if (n_layers == 0) return {};
  if (n_layers == 1) return {avg_budget};

  std::vector<double> spread(n_layers);
  double spread_sum = 0.0;
  for (size_t i = 0; i < n_layers; ++i) {
    spread[i] = 1.0 - std::clamp(concentrations[i], 0.0, 1.0);
    spread_sum += spread[i];
  }
  if (spread_sum <= 0.0) return std::vector<int>(n_layers, avg_budget);  // all concentrated

  std::vector<double> raw(n_layers);
  for (size_t i = 0; i < n_layers; ++i) {
    const double weight = spread[i] * double(n_layers) / spread_sum;  // mean 1
    raw[i] = avg_budget * ((1.0 - strength) + strength * weight);
  }
  return floor_and_round(std::move(raw), double(n_sink + 1));
}

}  // namespace squeezekv
