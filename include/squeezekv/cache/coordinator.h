// BudgetCoordinator: one per model cache. Each layer reports one measurement during the prompt
// (the first report wins); when every layer has reported, the allocator computes the schedule
// once and the coordinator publishes each layer's budget to whoever attached for that layer (a
// LayerCache, whose set_budget trims at once). It knows layers only by index: the model's layer
// indices, of which only the scheduled ones (the evicting layers; a sliding layer holds its window
// and is no part of any schedule) report and get a budget.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/core/state_stream.h"

namespace squeezekv {

class BudgetCoordinator {
 public:
  // scheduled: one flag per layer (empty: every layer); at least one must be set.
  BudgetCoordinator(int n_layers, std::shared_ptr<const BudgetAllocator> allocator, std::vector<bool> scheduled = {});

  using Publish = std::function<void(int budget)>;
  void attach(int layer, Publish publish);
  // Called with the whole schedule (one per model layer) when it is final, before any layer's
  // publish: the model cache keeps the schedule its layers conserve.
  using PublishSchedule = std::function<void(const std::vector<int>& budgets)>;
  void on_schedule(PublishSchedule publish) { on_schedule_ = std::move(publish); }
  // A layer that is not scheduled is ignored (the engine may measure every layer alike).
  void report(int layer, double measurement);
  bool reported(int layer) const { return measured_[size_t(layer)].has_value(); }
  bool is_final() const { return !budgets_.empty(); }
  int n_layers() const { return int(measured_.size()); }
  bool scheduled(int layer) const { return scheduled_[size_t(layer)]; }
  int n_scheduled() const { return n_scheduled_; }
  // The published schedule (empty until final) and the measurements behind it, one per model
  // layer: 0 for a layer that is not scheduled. The allocator saw the scheduled layers' alone, in
  // layer order.
  const std::vector<int>& budgets() const { return budgets_; }
  std::vector<double> measurements() const;
  const BudgetAllocator& allocator() const { return *allocator_; }
  // The longest sequence the cache will see (0 = unknown): no layer needs more rows than that.
  void set_max_rows(int rows) { max_rows_ = rows; }
  void reset();

  // Saving (cache/cache_state.cc): the measurements, the schedule and max_rows. load_state reads
  // them into a coordinator that has published nothing; a final schedule goes to on_schedule's
  // callback, not to the layers (each layer's budget is saved with it).
  void save_state(StateWriter& out) const;
  void load_state(StateReader& in);

 private:
  std::shared_ptr<const BudgetAllocator> allocator_;
  std::vector<Publish> layers_;
  PublishSchedule on_schedule_;
  std::vector<std::optional<double>> measured_;
  std::vector<bool> scheduled_;
  int n_scheduled_ = 0;
  std::vector<int> budgets_;
  int max_rows_ = 0;
};

}  // namespace squeezekv
