#include "squeezekv/methods/kivi_budget.h"

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

std::string kivi_budget_unfit(const KVCacheConfig& config) {
  const bool keys = kv_kivi(config.key_type()), values = kv_kivi(config.value_type());
  if ((!keys && !values) || keeps_every_row(config)) return "";
  const int budget = config.budget, group = config.kivi_group;
  if (2 * int64_t(config.kivi_residual) > budget) {
    const int most = budget / 2 / group * group;
    return invalid_value("kivi_residual", config.kivi_residual,
                         "more than half of budget = " + std::to_string(budget) +
                             ": the newest kivi_residual rows stay in fp16, so KIVI would quantize (nearly) nothing "
                             "and hold more bytes than f16 (choose kivi_residual <= " +
                             std::to_string(most) + ", a multiple of kivi_group = " + std::to_string(group) +
                             ", or a larger budget)");
  }
  if (keys && group > budget) {
    return invalid_value("kivi_group", group,
                         "more than budget = " + std::to_string(budget) +
                             ": a key group would never fill, so no key would be quantized (choose a kivi_group "
                             "<= the budget, or a larger budget)");
  }
  return "";
}

}  // namespace squeezekv
