#include "squeezekv/cache/coordinator.h"

#include <cmath>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv {

BudgetCoordinator::BudgetCoordinator(int n_layers, std::shared_ptr<const BudgetAllocator> allocator)
    : allocator_(std::move(allocator)), layers_(size_t(n_layers)),
      measured_(size_t(n_layers)) {
  require(n_layers >= 1, "n_layers", n_layers, "must be at least 1");
}

void BudgetCoordinator::attach(int layer, Publish publish) {
  require(layer >= 0 && layer < n_layers(), "layer", layer,
          "out of range [0, " + std::to_string(n_layers()) + ")");
  layers_[size_t(layer)] = std::move(publish);
}

void BudgetCoordinator::report(int layer, double measurement) {
  require(layer >= 0 && layer < n_layers(), "layer", layer,
          "out of range [0, " + std::to_string(n_layers()) + ")");
  require(std::isfinite(measurement), "measurement", measurement, "must be finite");
  if (measured_[size_t(layer)] || is_final()) return;  // the first report wins
  measured_[size_t(layer)] = measurement;
  for (const auto& m : measured_) {
    if (!m) return;
  }
  budgets_ = allocator_->allocate(n_layers(), measurements(), max_rows_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]) layers_[i](budgets_[i]);
  }
}

std::vector<double> BudgetCoordinator::measurements() const {
  std::vector<double> out;
  for (const auto& m : measured_) out.push_back(m.value_or(0.0));
  return out;
}

void BudgetCoordinator::reset() {
  for (auto& m : measured_) m.reset();
  budgets_.clear();
}

}  // namespace squeezekv
