// The global allocator (KVzip's setting, and kvpress's AdaKV across layers): one ranking of every
// held row's keep priority across all layers and KV heads; a layer-head keeps what ranks above the
// single threshold, the model's total conserved (layers x KV heads x budget rows), each head keeping
// at least ceil(global_floor x budget) of its best rows. The ranking runs when the prompt is
// compressed (ModelCache::end_prompt, or after each chunk of a streamed one); until then, and for a
// cache that never ranks, every layer gets the average budget. It needs scores that mean the same
// in every layer (PolicyInfo::ranks_across_layers); KVCacheConfig::validate refuses the others.
#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/core/component_info.h"

namespace squeezekv {
namespace {

class GlobalAllocator final : public BudgetAllocator {
 public:
  GlobalAllocator(int avg, double floor) : avg_(avg), floor_(floor) {}
  std::string_view name() const override { return "global"; }
  std::vector<int> allocate(int n_layers, std::span<const double>, int) const override {
    return std::vector<int>(size_t(n_layers), avg_);
  }
  double head_floor() const override { return floor_; }

 private:
  int avg_;
  double floor_;
};

const ParamSpec kParams[] = {
    {"global_floor",
     ParamKind::real,
     "0.1",
     "global: share of the average budget each layer-head keeps at least",
     0,
     1,
     false,
     {},
     {},
     true,
     false,
     {},
     /*label=*/"floor",
     /*omit_if=*/"0.1"},
};
constexpr std::string_view kReads[] = {"budget"};

}  // namespace

extern const AllocatorInfo global_allocator_info = {
    "global",
    "one ranking of every layer's and head's rows by the policy's scores, the total conserved",
    kParams,
    kReads,
    "",
    [](const ComponentParams& c) -> std::unique_ptr<BudgetAllocator> {
      return std::make_unique<GlobalAllocator>(c.budget, c.get_real("global_floor"));
    },
    /*validate=*/nullptr,
    /*uses=*/nullptr,
    /*unbounded=*/false,
    /*ranks_globally=*/true};

}  // namespace squeezekv
