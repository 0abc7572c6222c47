// The memory-bandwidth probe's kernel equals its scalar twin exactly (wrapping integer sums) at
// every length and misalignment, on every SIMD target.
#include "squeezekv/ops/stream_read.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/hwy_targets.h"

namespace squeezekv {
namespace {

TEST(ops_stream_read, EqualsTheScalarTwin) {
  std::vector<uint8_t> buffer(5000);
  uint64_t state = 1;
  for (uint8_t& b : buffer) b = uint8_t((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  testing::for_each_target([&] {
    for (size_t offset : {0u, 1u, 3u, 8u}) {
      for (size_t bytes : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 255u, 256u, 257u, 1000u, 4096u}) {
        EXPECT_EQ(stream_read(buffer.data() + offset, bytes), stream_read_scalar(buffer.data() + offset, bytes))
            << "offset " << offset << " bytes " << bytes;
      }
    }
  });
}

}  // namespace
}  // namespace squeezekv
