// The unevicted baseline: every row is kept.
#include "squeezekv/core/component_info.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {
namespace {

class FullPolicy final : public TokenPolicy {
 public:
  std::string_view name() const override { return "full"; }
  bool bounded() const override { return false; }
  void evict(LayerRows&, int) override {}
};

}  // namespace

extern const PolicyInfo full_policy_info = {
    "full",
    "keep every row",
    {},
    {},
    /*scores_rows=*/false,
    [](const ComponentParams&) -> std::unique_ptr<TokenPolicy> { return std::make_unique<FullPolicy>(); },
    /*validate=*/nullptr,
    /*methods=*/{},
    /*keeps_every_row=*/true};

}  // namespace squeezekv
