// stream_read with Highway (one compilation per target, dispatched at run time): four independent
// vector accumulators so the loop is bound by loads, not by the add latency.
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/stream_read.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cstring>

#include "squeezekv/ops/stream_read.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

uint64_t StreamRead(const void* data, size_t bytes) {
  const hn::ScalableTag<uint64_t> d;
  const size_t lanes = hn::Lanes(d);
  const auto* words = static_cast<const uint64_t*>(data);  // LoadU: no alignment needed
  const size_t n_words = bytes / sizeof(uint64_t);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * lanes <= n_words; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, words + i));
    a1 = hn::Add(a1, hn::LoadU(d, words + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(d, words + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(d, words + i + 3 * lanes));
  }
  // Lanes summed here in uint64_t (wrapping): hwy's SumOfLanes reduces u64 with a signed
  // intrinsic on AVX-512, which UBSan reports as overflow.
  HWY_ALIGN uint64_t lane_sums[hn::MaxLanes(d)];
  hn::Store(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), d, lane_sums);
  uint64_t sum = 0;
  for (size_t k = 0; k < lanes; ++k) sum += lane_sums[k];
  const auto* bytes_in = static_cast<const uint8_t*>(data);
  for (; i < n_words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes_in + i * sizeof(uint64_t), sizeof w);
    sum += w;
  }
  for (size_t b = n_words * sizeof(uint64_t); b < bytes; ++b) sum += bytes_in[b];
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(StreamRead);

uint64_t stream_read(const void* data, size_t bytes) { return HWY_DYNAMIC_DISPATCH(StreamRead)(data, bytes); }

uint64_t stream_read_scalar(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t n_words = bytes / sizeof(uint64_t);
  uint64_t sum = 0;
  for (size_t i = 0; i < n_words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * sizeof(uint64_t), sizeof w);
    sum += w;
  }
  for (size_t b = n_words * sizeof(uint64_t); b < bytes; ++b) sum += p[b];
  return sum;
}

}  // namespace squeezekv
#endif  // HWY_ONCE
