// Runs a test body once for every SIMD target that is both compiled in and supported by this
// CPU, with HWY_DYNAMIC_DISPATCH forced to that target (as hwy's HWY_EXPORT_AND_TEST_P does).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "hwy/targets.h"

namespace squeezekv::testing {

template <class Body>
void for_each_target(Body body) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (const int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(std::string("target ") + hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace squeezekv::testing
