#include "squeezekv/alloc/pyramid_budgets.h"

#include <algorithm>
#include <cmath>

#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {

std::vector<int> pyramid_budgets(int n_layers, int avg_budget, int n_sink, double beta) {
  require(n_layers >= 0, "n_layers", n_layers, "must be at least 0");
  require(n_sink >= 0, "n_sink", n_sink, "must be at least 0");
  require_avg_budget(avg_budget, n_sink);
  require(beta >= 1.0 && std::isfinite(beta), "beta", beta, "must be at least 1 (1 = uniform)");
  if (n_layers == 0) return {};
  const double floor = n_sink + 1;
  if (n_layers == 1) return {std::max(avg_budget, n_sink + 1)};
  const double span = (avg_budget - floor) * (beta - 1.0);
  const double hi = avg_budget + span, lo = avg_budget - span;
  std::vector<double> raw(static_cast<size_t>(n_layers));
  for (int i = 0; i < n_layers; ++i) raw[size_t(i)] = hi + (lo - hi) * i / (n_layers - 1);
  return floor_and_round(std::move(raw), floor);
}

}  // namespace squeezekv
