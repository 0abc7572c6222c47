// The unevicted baseline: every row is kept.
#include "policy/policies.h"

namespace squeezekv {
namespace {

class FullPolicy final : public TokenPolicy {
 public:
  std::string_view name() const override { return "full"; }
  bool bounded() const override { return false; }
  void evict(LayerRows&, int) override {}
};

}  // namespace

std::unique_ptr<TokenPolicy> make_full_policy() { return std::make_unique<FullPolicy>(); }

}  // namespace squeezekv
