// ConservedSchedule: a model cache's per-layer schedule, conserved as the layers fill. A layer cannot
// hold more rows than it has seen (or than its span allows); the rows a schedule gives it beyond
// that go to the layers that can hold them (alloc/conserve_budgets.h), so that the model holds
// exactly the promised total whenever it can. Each layer asks for its budget at its current cap; the
// layers of one model cache see the same tokens, so the last cap's result is kept and shared. The
// model cache owns its one schedule: fixed at build (uniform, pyramid) or set when its coordinator
// publishes a measured one.
#pragma once

#include <cstdint>
#include <vector>

#include "squeezekv/alloc/conserve_budgets.h"

namespace squeezekv {

class ConservedSchedule {
 public:
  // budgets: one per model layer; scheduled: which layers take part (a sliding layer does not).
  void set(std::vector<int> budgets, std::vector<bool> scheduled);
  void clear();
  bool empty() const { return budgets_.empty(); }
  // Scheduled layer `layer`'s budget when each scheduled layer can hold at most `cap` rows.
  int budget(int layer, int64_t cap);

 private:
  std::vector<int> budgets_;
  std::vector<bool> scheduled_;
  std::vector<int> schedule_;   // the scheduled layers' budgets, in order
  std::vector<int> conserved_;  // per model layer, at cap_
  std::vector<int> held_;       // the scheduled layers', at cap_
  ConserveScratch scratch_;
  int least_ = 0, most_ = 0;  // the schedule's smallest and largest budgets
  int64_t cap_ = -1;
};

}  // namespace squeezekv
