// The allocator's measurement feed (engine.h): an allocator that reads the residual stream
// (MeasureSource::residual) measures the cache's first update, as one that reads keys does, so the
// prompt is held whole for one prefill chunk at most; the engine hands it each layer's residual
// entering the layer and after the attention add, and reports what it measures to the coordinator.
#include "squeezekv/engine/engine.h"

namespace squeezekv {

bool Engine::measures_residual(const ModelCache& cache) {
  const BudgetCoordinator* coordinator = cache.coordinator();
  return coordinator && coordinator->allocator().source() == MeasureSource::residual && !coordinator->is_final() &&
         !coordinator->reported(0);
}

void Engine::feed_residual(int l, std::span<const SequenceStep> steps) {
  const auto dim = size_t(model_.config().dim);
  for (size_t s = 0; s < steps.size(); ++s) {
    const SeqSpan& sp = spans_[s];
    const float* before = before_.data() + size_t(sp.row0) * dim;
    const float* after = x_.data() + size_t(sp.row0) * dim;
    if (observer_) observer_(l, before, after, sp.n, int(dim));
    if (sp.measure) {  // the last layer's report publishes the schedule
      BudgetCoordinator* coordinator = steps[s].cache->coordinator();
      coordinator->report(l, coordinator->allocator().measure_residual(before, after, sp.n, int(dim)));
    }
  }
}

}  // namespace squeezekv
