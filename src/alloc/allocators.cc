// The layer allocators: none (full cache), uniform, pyramid (fixed taper), squeeze (measured).
#include <algorithm>
#include <string>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/alloc/hidden_cosine_budgets.h"
#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/core/errors.h"

namespace squeezekv {
namespace {

class NoneAllocator final : public BudgetAllocator {
 public:
  std::string_view name() const override { return "none"; }
  std::vector<int> allocate(int n_layers, std::span<const double>, int) const override {
    return std::vector<int>(size_t(n_layers), kUnbounded);
  }
};

class UniformAllocator final : public BudgetAllocator {
 public:
  explicit UniformAllocator(int avg) : avg_(avg) {}
  std::string_view name() const override { return "uniform"; }
  std::vector<int> allocate(int n_layers, std::span<const double>, int) const override {
    return std::vector<int>(size_t(n_layers), avg_);
  }

 private:
  int avg_;
};

class PyramidAllocator final : public BudgetAllocator {
 public:
  PyramidAllocator(int avg, int n_sink, double beta) : avg_(avg), n_sink_(n_sink), beta_(beta) {}
  std::string_view name() const override { return "pyramid"; }
  std::vector<int> allocate(int n_layers, std::span<const double>, int) const override {
    return pyramid_budgets(n_layers, avg_, n_sink_, beta_);
  }

 private:
  int avg_, n_sink_;
  double beta_;
};

class SqueezeAllocator final : public BudgetAllocator {
 public:
  SqueezeAllocator(int avg, int n_sink, double strength, Importance importance, double fraction)
      : avg_(avg), n_sink_(n_sink), strength_(strength), importance_(importance), fraction_(fraction) {}
  std::string_view name() const override { return "squeeze"; }
  std::optional<Importance> measures() const override { return importance_; }
  std::vector<int> allocate(int n_layers, std::span<const double> measurements,
                            int max_rows) const override {
    require(int(measurements.size()) == n_layers, "measurements", measurements.size(),
            "need one per layer (" + std::to_string(n_layers) + ")");
    if (importance_ == Importance::hidden_cosine) {
      return hidden_cosine_budgets(measurements, avg_, n_sink_, fraction_, strength_, max_rows);
    }
    return squeeze_budgets(measurements, avg_, n_sink_, strength_);
  }

 private:
  int avg_, n_sink_;
  double strength_;
  Importance importance_;
  double fraction_;
};

}  // namespace

bool is_allocator(std::string_view name) {
  return name == "none" || name == "uniform" || name == "pyramid" || name == "squeeze";
}

std::unique_ptr<BudgetAllocator> make_allocator(std::string_view name, const KVCacheConfig& config) {
  if (name == "none") return std::make_unique<NoneAllocator>();
  if (name == "uniform") return std::make_unique<UniformAllocator>(config.budget);
  if (name == "pyramid") {
    return std::make_unique<PyramidAllocator>(config.budget, config.n_sink, config.beta);
  }
  if (name == "squeeze") {
    return std::make_unique<SqueezeAllocator>(config.budget, config.n_sink, config.strength,
                                              config.importance, config.squeeze_fraction);
  }
  throw InvalidArgument(invalid_value("allocator", std::string(name),
                                      "unknown layer allocator (none, uniform, pyramid, squeeze)"));
}

}  // namespace squeezekv
