// PyramidKV's allocator: a fixed linear taper of budgets over depth (pyramid_budgets), known when
// the cache is built.
#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/core/component_info.h"

namespace squeezekv {
namespace {

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

const ParamSpec kParams[] = {
    {"beta",
     ParamKind::real,
     "2",
     "pyramidkv: taper steepness (1 = uniform)",
     1,
     1e6,
     false,
     {},
     {},
     true,
     false,
     {},
     /*label=*/"beta"},
};
constexpr std::string_view kReads[] = {"budget", "n_sink"};

}  // namespace

extern const AllocatorInfo pyramid_allocator_info = {"pyramid",
                                                     "a fixed linear taper of budgets over depth",
                                                     kParams,
                                                     kReads,
                                                     "",
                                                     [](const ComponentParams& c) -> std::unique_ptr<BudgetAllocator> {
                                                       return std::make_unique<PyramidAllocator>(c.budget, c.n_sink,
                                                                                                 c.get_real("beta"));
                                                     }};

}  // namespace squeezekv
