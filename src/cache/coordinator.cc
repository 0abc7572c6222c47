#include "squeezekv/cache/coordinator.h"

#include <cmath>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv {

BudgetCoordinator::BudgetCoordinator(int n_layers, std::shared_ptr<const BudgetAllocator> allocator,
                                     std::vector<bool> scheduled)
    : allocator_(std::move(allocator)), scheduled_(std::move(scheduled)) {
  require(n_layers >= 1, "n_layers", n_layers, "must be at least 1");
  if (scheduled_.empty()) scheduled_.assign(size_t(n_layers), true);
  require(scheduled_.size() == size_t(n_layers), "scheduled.size()", scheduled_.size(),
          "must equal n_layers = " + std::to_string(n_layers));
  for (const bool s : scheduled_) n_scheduled_ += s ? 1 : 0;
  require(n_scheduled_ >= 1, "scheduled", "no layer", "a coordinator needs at least one scheduled layer");
  layers_.resize(size_t(n_layers));
  measured_.resize(size_t(n_layers));
}

void BudgetCoordinator::attach(int layer, Publish publish) {
  require(layer >= 0 && layer < n_layers(), "layer", layer, "out of range [0, " + std::to_string(n_layers()) + ")");
  require(scheduled(layer), "layer", layer, "is not scheduled (a sliding layer holds its window)");
  layers_[size_t(layer)] = std::move(publish);
}

void BudgetCoordinator::report(int layer, double measurement) {
  require(layer >= 0 && layer < n_layers(), "layer", layer, "out of range [0, " + std::to_string(n_layers()) + ")");
  require(std::isfinite(measurement), "measurement", measurement, "must be finite");
  if (!scheduled(layer) || measured_[size_t(layer)] || is_final()) return;  // the first report wins
  measured_[size_t(layer)] = measurement;
  std::vector<double> scheduled_measurements;
  for (size_t i = 0; i < measured_.size(); ++i) {
    if (!scheduled_[i]) continue;
    if (!measured_[i]) return;
    scheduled_measurements.push_back(*measured_[i]);
  }
  // The allocator sees the scheduled layers alone, in order: its average and its taper are theirs.
  const std::vector<int> schedule = allocator_->allocate(n_scheduled_, scheduled_measurements, max_rows_);
  budgets_.assign(measured_.size(), 0);
  for (size_t i = 0, k = 0; i < measured_.size(); ++i) {
    if (scheduled_[i]) budgets_[i] = schedule[k++];
  }
  if (on_schedule_) on_schedule_(budgets_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i] && scheduled_[i]) layers_[i](budgets_[i]);
  }
}

std::vector<double> BudgetCoordinator::measurements() const {
  std::vector<double> out;
  for (const auto& m : measured_) out.push_back(m.value_or(0.0));  // never set for an unscheduled layer
  return out;
}

void BudgetCoordinator::reset() {
  for (auto& m : measured_) m.reset();
  budgets_.clear();
}

}  // namespace squeezekv
