// The fixed allocators: none (every layer unbounded, for the full policy) and uniform (every layer
// gets the average budget).
#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/core/component_info.h"

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

constexpr std::string_view kUniformReads[] = {"budget"};

}  // namespace

extern const AllocatorInfo none_allocator_info = {
    "none",
    "no budget: every row is kept (the full policy)",
    {},
    {},
    "",
    [](const ComponentParams&) -> std::unique_ptr<BudgetAllocator> { return std::make_unique<NoneAllocator>(); },
    /*validate=*/nullptr,
    /*uses=*/nullptr,
    /*unbounded=*/true};

extern const AllocatorInfo uniform_allocator_info = {"uniform",
                                                     "every layer gets the average budget",
                                                     {},
                                                     kUniformReads,
                                                     "",
                                                     [](const ComponentParams& c) -> std::unique_ptr<BudgetAllocator> {
                                                       return std::make_unique<UniformAllocator>(c.budget);
                                                     }};

}  // namespace squeezekv
