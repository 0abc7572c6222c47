// The squeeze allocator: per-layer budgets measured from the prompt. Two measurements:
// key-dispersion (the reference library's: how concentrated the layer's keys are, read by the
// layer cache from its first update) and hidden-cosine (the paper's: how little attention changes
// the residual stream, read by the engine).
#include <cmath>
#include <string>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/alloc/concentration.h"
#include "squeezekv/alloc/hidden_cosine_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/core/component_info.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {
namespace {

class SqueezeAllocator final : public BudgetAllocator {
 public:
  SqueezeAllocator(int avg, int n_sink, double strength, bool hidden_cosine, double fraction)
      : avg_(avg), n_sink_(n_sink), strength_(strength), hidden_cosine_(hidden_cosine), fraction_(fraction) {}
  std::string_view name() const override { return "squeeze"; }
  MeasureSource source() const override { return hidden_cosine_ ? MeasureSource::residual : MeasureSource::keys; }

  double measure_keys(const float* keys, int n_heads, int n_tokens, int dim) const override {
    return concentration_score(keys, n_heads, n_tokens, dim);
  }

  // The mean over the update's tokens of cos(residual before, residual after the attention add).
  double measure_residual(const float* before, const float* after, int n, int dim) const override {
    double mean = 0.0;
    for (int t = 0; t < n; ++t) {
      const float* a = before + size_t(t) * size_t(dim);
      const float* b = after + size_t(t) * size_t(dim);
      const double ab = dot(a, b, dim), aa = dot(a, a, dim), bb = dot(b, b, dim);
      mean += ab / (std::sqrt(aa * bb) + 1e-12) / n;
    }
    return mean;
  }

  std::vector<int> allocate(int n_layers, std::span<const double> measurements, int max_rows) const override {
    require(int(measurements.size()) == n_layers, "measurements", measurements.size(),
            "need one per layer (" + std::to_string(n_layers) + ")");
    if (hidden_cosine_) return hidden_cosine_budgets(measurements, avg_, n_sink_, fraction_, strength_, max_rows);
    return squeeze_budgets(measurements, avg_, n_sink_, strength_);
  }

 private:
  int avg_, n_sink_;
  double strength_;
  bool hidden_cosine_;
  double fraction_;
};

constexpr std::string_view kImportances[] = {"key-dispersion", "hidden-cosine"};

// In the order a sweep label shows them: "squeeze hidden-cosine p=0.3 s=1".
const ParamSpec kParams[] = {
    {"importance",
     ParamKind::choice,
     "key-dispersion",
     "squeeze: what is measured, key-dispersion (keys) or hidden-cosine (residual stream)",
     0,
     0,
     false,
     kImportances,
     {},
     true,
     false,
     {},
     /*label=*/"importance"},
    {"squeeze_fraction",
     ParamKind::real,
     "0.6",
     "squeeze (hidden-cosine): budget share of the least important layers",
     0,
     1,
     /*min_open=*/true,
     {},
     {},
     true,
     false,
     {},
     /*label=*/"p"},
    {"strength",
     ParamKind::real,
     "1",
     "squeeze: 0 = uniform (h2o), 1 = full reallocation",
     0,
     1,
     false,
     {},
     {},
     true,
     false,
     {},
     /*label=*/"s"},
};
constexpr std::string_view kReads[] = {"budget", "n_sink"};

}  // namespace

extern const AllocatorInfo squeeze_allocator_info = {
    "squeeze", "per-layer budgets measured from the prompt", kParams, kReads,
    "key-dispersion: mean pairwise cosine of each layer's first-update keys; hidden-cosine: cosine "
    "of the residual stream across each layer's attention",
    [](const ComponentParams& c) -> std::unique_ptr<BudgetAllocator> {
      return std::make_unique<SqueezeAllocator>(c.budget, c.n_sink, c.get_real("strength"),
                                                c.get_text("importance") == "hidden-cosine",
                                                c.get_real("squeeze_fraction"));
    },
    nullptr,
    // The squeeze fraction applies to the hidden-cosine measurement only.
    [](const ComponentParams& c, std::string_view param) {
      return param != "squeeze_fraction" || c.get_text("importance") == "hidden-cosine";
    }};

}  // namespace squeezekv
