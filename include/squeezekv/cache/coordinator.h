// BudgetCoordinator: one per model cache. Each layer reports one measurement during the prompt
// (the first report wins); when every layer has reported, the allocator computes the schedule
// once and the coordinator publishes each layer's budget to whoever attached for that layer (a
// LayerCache, whose set_budget trims at once). It knows layers only by index.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "squeezekv/alloc/budget_allocator.h"

namespace squeezekv {


class BudgetCoordinator {
 public:
  BudgetCoordinator(int n_layers, std::shared_ptr<const BudgetAllocator> allocator);

  using Publish = std::function<void(int budget)>;
  void attach(int layer, Publish publish);
  void report(int layer, double measurement);
  bool reported(int layer) const { return measured_[size_t(layer)].has_value(); }
  bool is_final() const { return !budgets_.empty(); }
  int n_layers() const { return int(measured_.size()); }
  // The published schedule (empty until final) and the measurements behind it.
  const std::vector<int>& budgets() const { return budgets_; }
  std::vector<double> measurements() const;
  const BudgetAllocator& allocator() const { return *allocator_; }
  // The longest sequence the cache will see (0 = unknown): no layer needs more rows than that.
  void set_max_rows(int rows) { max_rows_ = rows; }
  void reset();

 private:
  std::shared_ptr<const BudgetAllocator> allocator_;
  std::vector<Publish> layers_;
  std::vector<std::optional<double>> measured_;
  std::vector<int> budgets_;
  int max_rows_ = 0;
};

}  // namespace squeezekv
