// The `turns` table the kernels of keys turned back by their shifts take (kv_rows.h): per shift
// s < n_shifts, rope_turn_row of rope_cache(s) at base 10000.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv::test {

inline std::vector<float> rope_turns(size_t n_shifts, size_t n_rot, bool neox) {
  std::vector<float> cos_sin(n_rot), turns(n_shifts * 2 * n_rot);
  for (size_t s = 0; s < n_shifts; ++s) {
    rope_cache(int64_t(s), int64_t(n_rot), 10000.0f, cos_sin.data());
    rope_turn_row(cos_sin.data(), n_rot, neox, turns.data() + s * 2 * n_rot);
  }
  return turns;
}

}  // namespace squeezekv::test
