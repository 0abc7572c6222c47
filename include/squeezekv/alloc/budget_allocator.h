// BudgetAllocator: how many rows each layer gets — the other axis of every eviction method
// (docs/semantics.md, section 2), independent of the token policy inside a layer.
//
// An allocator that measures the prompt says what it reads (source()) and turns what it reads into
// one number per layer (measure_keys / measure_residual); the layer cache and the engine call
// those without knowing what the number means, and a cache whose allocator measures nothing
// computes nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace squeezekv {

// What a measuring allocator reads once per layer, during the first update of the prompt.
enum class MeasureSource : uint8_t {
  none,      // a schedule fixed when the cache is built
  keys,      // the layer's keys of its first update (the layer cache measures)
  residual,  // the residual stream before and after the layer's attention (the engine measures)
};

class BudgetAllocator {
 public:
  virtual ~BudgetAllocator() = default;
  virtual std::string_view name() const = 0;
  virtual MeasureSource source() const { return MeasureSource::none; }
  // source() == keys: keys [n_heads, n_tokens, dim] of the layer's first update.
  virtual double measure_keys(const float* /*keys*/, int /*n_heads*/, int /*n_tokens*/, int /*dim*/) const {
    return 0.0;
  }
  // source() == residual: the residual entering the layer and after its attention add, [n, dim].
  virtual double measure_residual(const float* /*before*/, const float* /*after*/, int /*n_tokens*/,
                                  int /*dim*/) const {
    return 0.0;
  }
  // Per-layer budgets; `measurements` has one value per layer when source() != none, else empty.
  // max_rows > 0 is the longest sequence the cache will see (a budget beyond it is wasted);
  // allocators that redistribute may use it, the fixed ones ignore it.
  virtual std::vector<int> allocate(int n_layers, std::span<const double> measurements, int max_rows) const = 0;
  // An allocator that ranks every layer's rows together (AllocatorInfo::ranks_globally): the share
  // of the average budget each layer-head keeps at least (0 = none but the rows the policy protects).
  virtual double head_floor() const { return 0.0; }
};

// A budget no eviction ever reaches (the `none` allocator, used by `full`).
inline constexpr int kUnbounded = 1 << 30;

}  // namespace squeezekv
