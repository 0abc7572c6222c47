// KIVI storage kernels (include/squeezekv/ops/kivi_rows.h), compiled once per instruction set by
// Highway and picked at run time (HWY_DYNAMIC_DISPATCH). Quantizing and decoding one group are
// scalar (once per G stored tokens); the two attention kernels are SIMD and decode the codes in
// registers. The scalar twins at the end are the test oracles: same products, same order, explicit
// fused multiply-adds (this file is built with -ffp-contract=off), so SIMD and scalar agree to the
// bit. Targets without a native FMA (SSSE3, SSE4, EMU128: Highway's MulAdd is a multiply and an
// add there) run the scalar twins.
#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/kivi_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

// Scalar helpers shared by every target and by the twins (defined once: foreach_target includes
// this file again for each target).
#ifndef SQUEEZEKV_OPS_KIVI_ROWS_HELPERS
#define SQUEEZEKV_OPS_KIVI_ROWS_HELPERS
namespace squeezekv {
namespace {
namespace kivi {

inline float half_at(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }

// Code i of a run of nb bytes of b-bit codes (byte i % nb, bits b * (i / nb)).
inline unsigned code_at(const uint8_t* run, size_t nb, int bits, size_t i) {
  return (unsigned(run[i % nb]) >> (unsigned(bits) * unsigned(i / nb))) & ((1u << bits) - 1u);
}

}  // namespace kivi
}  // namespace
}  // namespace squeezekv
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kivi_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

#include "ops/query_blocks-inl.h"  // NOLINT: per-target code, inside this namespace on purpose

// ---- Runs of codes as vectors ----
// A run of n codes in nb bytes becomes n / N vectors of N consecutive codes (tokens of a key
// channel, channels of a value group). Two layouts, chosen by the lanes N:
//  - N divides nb: vector (c, k) holds codes k * nb + c * N.. = bytes c * N.. of the run, shifted
//    by k * b (one load of N bytes serves the 8 / b vectors of a chunk c);
//  - nb divides N (short runs: nb = 2, 4, 8): the run's bytes repeated N / nb times; vector t
//    holds codes t * N.., lane l shifted by b * (t * N / nb + l / nb).
// A pass keeps V of these vectors (sharing one load) for Q queries in registers.
struct RunPlan {
  size_t nb = 0, n = 0, N = 0;
  int bits = 0;
  bool repeated = false;
  // Vectors one load serves: 8 / b (chunks) or n / N (repeated), a power of two like N and, when
  // repeated, nb: the passes index with shifts and masks, never a division.
  size_t per_load = 0;
  int log2_per_load = 0, log2_n_lanes = 0, log2_nb = 0;
  size_t vectors() const { return n >> log2_n_lanes; }
  // Vector u (u < vectors(); consecutive u share a load in runs of per_load): first code, and
  // byte offset of its load.
  size_t first_code(size_t u) const {
    if (repeated) return u << log2_n_lanes;
    return (u & (per_load - 1)) * nb + ((u >> log2_per_load) << log2_n_lanes);
  }
  size_t load_offset(size_t u) const { return repeated ? 0 : (u >> log2_per_load) << log2_n_lanes; }
};

template <class D>
HWY_INLINE bool MakePlan(D d, int bits, size_t n, RunPlan& plan) {
  const size_t N = hn::Lanes(d), nb = n * size_t(bits) / 8;
  plan.nb = nb;
  plan.n = n;
  plan.N = N;
  plan.bits = bits;
  plan.log2_n_lanes = int(hwy::FloorLog2(N));
  if (N > n) return false;  // N is a power of two (16, 8 or 4 on every target)
  if (nb % N == 0) {
    plan.repeated = false;
    plan.per_load = 8 / size_t(bits);
  } else if (N % nb == 0 && (nb == 2 || nb == 4 || nb == 8)) {
    plan.repeated = true;
    plan.per_load = n / N;
    plan.log2_nb = int(hwy::FloorLog2(nb));
  } else {
    return false;
  }
  plan.log2_per_load = int(hwy::FloorLog2(plan.per_load));
  return true;
}

// Runs f(tag) with the widest of 16, 8 and 4 lanes that a run of n b-bit codes splits into;
// false when none does (the caller runs the scalar twin).
template <class F>
HWY_INLINE bool WithRunTag(int bits, size_t n, const F& f) {
  RunPlan plan;
  const hn::CappedTag<float, 16> d16;
  const hn::CappedTag<float, 8> d8;
  const hn::CappedTag<float, 4> d4;
  if (MakePlan(d16, bits, n, plan)) {
    f(d16, plan);
  } else if (MakePlan(d8, bits, n, plan)) {
    f(d8, plan);
  } else if (MakePlan(d4, bits, n, plan)) {
    f(d4, plan);
  } else {
    return false;
  }
  return true;
}

// The run's nb bytes (2, 4 or 8) repeated over the N byte lanes of d8.
template <class D8>
HWY_INLINE hn::Vec<D8> RepeatedBytes(D8 d8, const uint8_t* run, size_t nb) {
  if (nb == 2) return hn::BitCast(d8, hn::Set(hn::Repartition<uint16_t, D8>(), load_u16(run)));
  if (nb == 4) {
    uint32_t w;
    std::memcpy(&w, run, 4);
    return hn::BitCast(d8, hn::Set(hn::Repartition<uint32_t, D8>(), w));
  }
  if constexpr (hn::MaxLanes(D8()) >= 8) {
    uint64_t w;
    std::memcpy(&w, run, 8);
    return hn::BitCast(d8, hn::Set(hn::Repartition<uint64_t, D8>(), w));
  }
  return hn::Zero(d8);  // not reached: MakePlan repeats 8 bytes only over 16 lanes
}

// How a pass turns its load into V vectors of codes: per-lane shifts and a mask (kShifted,
// kRepeated), or, when the pass takes all 8 / b vectors of a chunk (kWholeChunk), vector v as
// bits [v * b, v * b + b) of each byte: no shift for the first, no mask for the last.
enum class Layout { kShifted, kWholeChunk, kRepeated };

template <Layout kLayout, class DU>
HWY_INLINE hn::Vec<DU> RawCodes(DU du, const uint8_t* run, size_t offset, size_t nb) {
  const hn::Rebind<uint8_t, DU> d8;
  if constexpr (kLayout == Layout::kRepeated) return hn::PromoteTo(du, RepeatedBytes(d8, run, nb));
  return hn::PromoteTo(du, hn::LoadU(d8, run + offset));
}

template <Layout kLayout, size_t V, class D>
HWY_INLINE void DecodeCodes(D d, hn::Vec<hn::RebindToUnsigned<D>> raw, const hn::Vec<hn::RebindToUnsigned<D>>* shifts,
                            hn::Vec<hn::RebindToUnsigned<D>> mask, hn::Vec<D>* code) {
  const hn::RebindToSigned<D> di;
  for (size_t v = 0; v < V; ++v) {
    auto x = raw;
    if constexpr (kLayout == Layout::kWholeChunk) {
      constexpr int kBits = 8 / int(V);
      if (v != 0) x = hn::ShiftRightSame(x, int(v) * kBits);
      if (v + 1 != V) x = hn::And(x, mask);
    } else {
      x = hn::And(x >> shifts[v], mask);
    }
    code[v] = hn::ConvertTo(d, hn::BitCast(di, x));
  }
}

// Lane shifts of the V vectors from u0, once per pass: b * (u mod per_load) for a chunk, or
// b * (u * N / nb + l / nb) in lane l of a repeated run.
template <size_t V, class DU>
HWY_INLINE void PassShifts(DU du, const RunPlan& plan, size_t u0, hn::Vec<DU>* shifts) {
  const int log2_bits = plan.bits == 4 ? 2 : 1;
  for (size_t v = 0; v < V; ++v) {
    const size_t u = u0 + v;
    if (plan.repeated) {
      const auto first = hn::Set(du, uint32_t((u << plan.log2_n_lanes) >> plan.log2_nb));
      const auto code = hn::Add(first, hn::ShiftRightSame(hn::Iota(du, 0), plan.log2_nb));
      shifts[v] = hn::ShiftLeftSame(code, log2_bits);
    } else {
      shifts[v] = hn::Set(du, uint32_t(u & (plan.per_load - 1)) << log2_bits);
    }
  }
}

// Calls f(layout constant) for the pass of V vectors from u0.
template <size_t V, class F>
HWY_INLINE void WithLayout(const RunPlan& plan, const F& f) {
  using L = Layout;
  if (plan.repeated) return f(std::integral_constant<L, L::kRepeated>());
  if (V == plan.per_load) return f(std::integral_constant<L, L::kWholeChunk>());
  f(std::integral_constant<L, L::kShifted>());
}

// Calls f(std::integral_constant<size_t, V>) for the largest V in {4, 2, 1} at most `limit`.
template <class F>
HWY_INLINE void WithVectors(size_t limit, const F& f) {
  if (limit >= 4) return f(std::integral_constant<size_t, 4>());
  if (limit >= 2) return f(std::integral_constant<size_t, 2>());
  f(std::integral_constant<size_t, 1>());
}

// Calls f(std::integral_constant<size_t, S>) for the largest S in {2, 1} at most `limit`.
template <class F>
HWY_INLINE void WithGroups(size_t limit, const F& f) {
  if (limit >= 2) return f(std::integral_constant<size_t, 2>());
  f(std::integral_constant<size_t, 1>());
}

// Passes over a run's vectors for Q queries: pass(V, u0, repeated) for consecutive u0, each
// pass's V vectors sharing one load and Q * V accumulators fitting the registers.
template <size_t Q, class Pass>
HWY_INLINE void ForEachPass(const RunPlan& plan, const Pass& pass) {
  const size_t total = plan.vectors();
  size_t u = 0;
  while (u < total) {
    // Vectors left in this load's run (chunked: the rest of the chunk's 8 / b shifts).
    const size_t in_load = plan.per_load - (u & (plan.per_load - 1));
    const size_t limit = std::min(in_load, kAccumulators / Q);
    size_t used = 0;
    WithVectors(limit, [&](auto vc) {
      used = decltype(vc)::value;
      pass(vc, u);
    });
    u += used;
  }
}

// A key group's mins as f32 (m32) and each query's q_d * s_d (qs, n_q rows of head_dim): the
// scales converted in registers, the products rounded as the twin rounds them.
HWY_INLINE void ScalesTimesQueries(const uint8_t* key_group, const float* q, size_t n_q, size_t ld_q, size_t head_dim,
                                   float* m32, float* qs) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  const auto* mins = reinterpret_cast<const hwy::float16_t*>(key_group);
  const auto* scales = mins + head_dim;
  size_t k = 0;
  for (; k + N <= head_dim; k += N) {
    hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, mins + k)), d, m32 + k);
    const auto s = hn::PromoteTo(d, hn::LoadU(dh, scales + k));
    for (size_t g = 0; g < n_q; ++g) hn::StoreU(hn::Mul(hn::LoadU(d, q + g * ld_q + k), s), d, qs + g * head_dim + k);
  }
  for (; k < head_dim; ++k) {
    m32[k] = kivi::half_at(key_group + 2 * k);
    const float s = kivi::half_at(key_group + 2 * (head_dim + k));
    for (size_t g = 0; g < n_q; ++g) qs[g * head_dim + k] = q[g * ld_q + k] * s;
  }
}

// ---- Key dots ----
// Lanes are tokens: per channel d, the run of G codes gives the V token vectors of the pass and
// each query's q_d * s_d is broadcast against them (acc = fma(qs, code, acc), d ascending). The
// first pass of a query block also runs the chains c = fma(q_d, m_d, c) of its (up to) four
// queries beside it, as one 4-lane vector whose latency the vector work hides.
template <size_t Q, size_t V, Layout kLayout, bool kWithC, class D>
HWY_INLINE void KeyPass(D d, const RunPlan& plan, size_t u0, const uint8_t* runs, size_t head_dim, const float* qt,
                        const float* qs, const float* m32, float* c, float* out, size_t ld_out) {
  const hn::RebindToUnsigned<D> du;
  const size_t nb = plan.nb, offset = plan.load_offset(u0);
  const auto mask = hn::Set(du, (1u << plan.bits) - 1u);
  hn::Vec<decltype(du)> shifts[V];
  PassShifts<V>(du, plan, u0, shifts);
  hn::Vec<D> acc[Q][V];
  for (size_t g = 0; g < Q; ++g) {
    for (size_t v = 0; v < V; ++v) acc[g][v] = hn::Zero(d);
  }
  const hn::CappedTag<float, 4> d4;
  auto cv = hn::LoadU(d4, c);
  for (size_t dd = 0; dd < head_dim; ++dd) {
    hn::Vec<D> code[V];
    DecodeCodes<kLayout, V>(d, RawCodes<kLayout>(du, runs + dd * nb, offset, nb), shifts, mask, code);
    for (size_t g = 0; g < Q; ++g) {
      const auto w = hn::Set(d, qs[g * head_dim + dd]);
      for (size_t v = 0; v < V; ++v) acc[g][v] = hn::MulAdd(w, code[v], acc[g][v]);
    }
    if constexpr (kWithC) cv = hn::MulAdd(hn::LoadU(d4, qt + 4 * dd), hn::Set(d4, m32[dd]), cv);
  }
  hn::StoreU(cv, d4, c);
  for (size_t g = 0; g < Q; ++g) {
    const auto cg = hn::Set(d, c[g]);
    for (size_t v = 0; v < V; ++v) {
      hn::StoreU(hn::Add(cg, acc[g][v]), d, out + g * ld_out + plan.first_code(u0 + v));
    }
  }
}

// Rows g0.. g0 + 3 of q (queries, or weights; zeros past n_q), their first n entries interleaved:
// qt[d * 4 + i] = q[(g0 + i) * ld_q + d].
HWY_INLINE void InterleaveFour(const float* q, size_t n_q, size_t ld_q, size_t g0, size_t n, float* qt) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const float* row[4];
  for (size_t i = 0; i < 4; ++i) row[i] = g0 + i < n_q ? q + (g0 + i) * ld_q : nullptr;
  auto load = [&](size_t i, size_t at) { return row[i] != nullptr ? hn::LoadU(d, row[i] + at) : hn::Zero(d); };
  size_t k = 0;
  for (; k + N <= n; k += N) {
    hn::StoreInterleaved4(load(0, k), load(1, k), load(2, k), load(3, k), d, qt + 4 * k);
  }
  for (; k < n; ++k) {
    for (size_t i = 0; i < 4; ++i) qt[4 * k + i] = row[i] != nullptr ? row[i][k] : 0.0f;
  }
}

template <class D>
void KeyDotsT(D d, const RunPlan& plan, const float* q, size_t n_q, size_t ld_q, const uint8_t* key_group,
              size_t head_dim, float* out, size_t ld_out) {
  // Per call: mins as f32, every query's q_d * s_d (the twin's rounded product), and
  // the queries interleaved by fours for the c chains (one 4-lane fma per channel: lane i is
  // query i's chain, as the twin's). On the stack up to 8 KiB, else a buffer that only grows.
  const size_t n_blocks = (n_q + 3) / 4, need = (1 + n_q + 4 * n_blocks) * head_dim;
  HWY_ALIGN float stack[2048];
  thread_local std::vector<float> heap;
  if (need > 2048 && heap.size() < need) heap.resize(std::max(need, 2 * heap.size()));
  float* m32 = need > 2048 ? heap.data() : stack;
  float* qs = m32 + head_dim;
  float* qt = qs + n_q * head_dim;
  ScalesTimesQueries(key_group, q, n_q, ld_q, head_dim, m32, qs);
  for (size_t b = 0; b < n_blocks; ++b) InterleaveFour(q, n_q, ld_q, 4 * b, head_dim, qt + 4 * b * head_dim);
  const uint8_t* runs = key_group + 4 * head_dim;
  InBlocksOfFour(n_q, [&](auto block, size_t g0) {
    constexpr size_t Q = decltype(block)::value;
    HWY_ALIGN float c[4] = {};
    bool first = true;
    ForEachPass<Q>(plan, [&](auto vc, size_t u0) {
      constexpr size_t V = decltype(vc)::value;
      const float* qtb = qt + g0 * head_dim;  // g0 is a multiple of 4
      const float* qsb = qs + g0 * head_dim;
      float* ob = out + g0 * ld_out;
      WithLayout<V>(plan, [&](auto layout) {
        constexpr Layout L = decltype(layout)::value;
        if (first) KeyPass<Q, V, L, true>(d, plan, u0, runs, head_dim, qtb, qsb, m32, c, ob, ld_out);
        else KeyPass<Q, V, L, false>(d, plan, u0, runs, head_dim, qtb, qsb, m32, c, ob, ld_out);
      });
      first = false;
    });
  });
}

// ---- Weighted value sums ----
// Per query g and value group: A_c = fma(w * s, code_c, A_c) and M = fma(w, m, M) over the rows,
// ascending, from 0; at the end out = out + (A + M): one fma per code (the old order, a = w * m,
// b = w * s, out = out + fma(b, code, a), took two float ops). Rows in blocks of kBlockRows: the
// block's rows with a nonzero weight listed and the weights interleaved by fours (four floats per
// row and block of four queries), then passes over the listed rows. A pass takes Q queries and V
// vectors (lanes are channels) at the same place in S consecutive groups and keeps their
// Q * S * V chains of A in registers, with each group's M for its (up to) four queries as one
// 4-lane vector beside them. The products w * s (the twin's rounded products: one 4-lane multiply
// per row and group) are formed a row ahead and stored, so that the FMAs broadcast them from
// memory. A and M wait in a small buffer between blocks.
constexpr size_t kBlockRows = 256;

// Indices (from j0) of the rows of [j0, j0 + r) whose n_w weights are not all zero.
HWY_INLINE size_t ActiveRows(const float* w, size_t n_w, size_t ld_w, size_t j0, size_t r, int32_t* idx) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t N = hn::Lanes(d);
  size_t count = 0, i = 0;
  // Iota once: built from a runtime start it goes through the stack (a store-forwarding stall).
  auto rows = hn::Iota(di, 0);
  const auto step = hn::Set(di, int32_t(N));
  for (; i + N <= r; i += N, rows = hn::Add(rows, step)) {
    auto any = hn::Ne(hn::LoadU(d, w + j0 + i), hn::Zero(d));
    for (size_t g = 1; g < n_w; ++g) any = hn::Or(any, hn::Ne(hn::LoadU(d, w + g * ld_w + j0 + i), hn::Zero(d)));
    // Compress in registers, then a plain store: the memory form of vpcompressd is slow on Zen 4.
    const auto keep = hn::RebindMask(di, any);
    hn::StoreU(hn::Compress(rows, keep), di, idx + count);
    count += hn::CountTrue(di, keep);
  }
  for (; i < r; ++i) {
    bool any = false;
    for (size_t g = 0; g < n_w; ++g) any = any || w[g * ld_w + j0 + i] != 0.0f;
    if (any) idx[count++] = int32_t(i);
  }
  return count;
}

// Passes over a value row for Q queries: pass(V, S, u0, v0) takes vectors u0.. u0 + V - 1 (one
// load's worth) of groups v0.. v0 + S - 1, Q * S * V accumulators fitting the registers.
template <size_t Q, class Pass>
HWY_INLINE void ForEachValuePass(const RunPlan& plan, size_t ng, const Pass& pass) {
  const size_t total = plan.vectors();
  size_t u = 0;
  while (u < total) {
    const size_t in_load = plan.per_load - (u & (plan.per_load - 1));
    size_t used = 0;
    WithVectors(std::min(in_load, kAccumulators / Q), [&](auto vc) {
      constexpr size_t V = decltype(vc)::value;
      if constexpr (Q * V <= kAccumulators) {
        used = V;
        for (size_t v0 = 0; v0 < ng;) {
          size_t took = 0;
          WithGroups(std::min(ng - v0, kAccumulators / (Q * V)), [&](auto sc) {
            constexpr size_t S = decltype(sc)::value;
            if constexpr (Q * V * S <= kAccumulators) {
              took = S;
              pass(vc, sc, u, v0);
            }
          });
          v0 += took;
        }
      }
    });
    u += used;
  }
}

// A group's (m, s) as f32 (m, s, m, s): both fp16 as one 32-bit word, converted in registers.
template <class D4>
HWY_INLINE hn::Vec<D4> MinScale(D4 d4, const uint8_t* group) {
  uint32_t word;
  std::memcpy(&word, group, 4);
  const auto pairs = hn::Set(hn::Repartition<uint32_t, D4>(), word);
  return hn::PromoteTo(d4, hn::LowerHalf(hn::BitCast(hn::Repartition<hwy::float16_t, D4>(), pairs)));
}

// One pass over a block's listed rows (idx[n_act] repeats the last: the pass reads one ahead).
// groups: the first group of the block's row 0 (groups gb bytes apart, rows rb); wt: the block's
// weights of the four queries, interleaved; ws: the products w * s of the four queries for the
// first group of listed row 0 (groups 4 floats apart, rows 4 * ng); mq: the first group's M
// (groups 4 apart); acc: the first query's A at the first group's channel 0 (groups gv apart,
// queries ld_acc). The first pass of the groups (u0 = 0) forms the products a row ahead of the
// sums and stores them (formed in registers, the compiler would broadcast them with shuffles,
// which compete with the FMAs), and runs the M chains; the others read the stored products.
template <size_t Q, size_t V, size_t S, Layout kLayout, class D>
HWY_INLINE void ValuePass(D d, const RunPlan& plan, size_t u0, const uint8_t* groups, size_t gb, size_t rb,
                          const int32_t* idx, size_t n_act, size_t ng, const float* wt, float* ws, float* mq,
                          float* acc, size_t gv, size_t ld_acc) {
  const hn::RebindToUnsigned<D> du;
  const hn::CappedTag<float, 4> d4;
  const size_t nb = plan.nb, offset = plan.load_offset(u0), step = 4 * ng;
  const bool first = u0 == 0;
  const auto mask = hn::Set(du, (1u << plan.bits) - 1u);
  hn::Vec<decltype(du)> shifts[V];
  PassShifts<V>(du, plan, u0, shifts);
  size_t at[V];
  for (size_t v = 0; v < V; ++v) at[v] = plan.first_code(u0 + v);
  hn::Vec<D> a[Q][S][V];
  for (size_t g = 0; g < Q; ++g) {
    for (size_t s = 0; s < S; ++s) {
      for (size_t v = 0; v < V; ++v) a[g][s][v] = hn::LoadU(d, acc + g * ld_acc + s * gv + at[v]);
    }
  }
  hn::Vec<decltype(d4)> m[S];
  for (size_t s = 0; s < S; ++s) m[s] = hn::LoadU(d4, mq + 4 * s);
  // (m, s, m, s) per group, for the M chains: two slots, the current row's and the next one's.
  HWY_ALIGN float pairs[2][S][4];
  const auto prepare = [&](size_t k) {
    const size_t i = size_t(idx[k]);
    const auto w4 = hn::LoadU(d4, wt + 4 * i);
    const uint8_t* group = groups + i * rb;
    for (size_t s = 0; s < S; ++s, group += gb) {
      const auto pair = MinScale(d4, group);
      hn::StoreU(hn::Mul(w4, hn::DupOdd(pair)), d4, ws + k * step + 4 * s);
      hn::Store(pair, d4, pairs[k & 1][s]);
    }
  };
  if (first) prepare(0);
  for (size_t k = 0; k < n_act; ++k) {
    if (first) prepare(k + 1);
    const size_t i = size_t(idx[k]);
    const float* wsk = ws + k * step;
    const uint8_t* row = groups + i * rb;
    for (size_t s = 0; s < S; ++s) {
      hn::Vec<D> code[V];
      DecodeCodes<kLayout, V>(d, RawCodes<kLayout>(du, row + s * gb + 4, offset, nb), shifts, mask, code);
      for (size_t g = 0; g < Q; ++g) {
        const auto b = hn::Set(d, wsk[4 * s + g]);
        for (size_t v = 0; v < V; ++v) a[g][s][v] = hn::MulAdd(b, code[v], a[g][s][v]);
      }
    }
    if (first) {
      const auto w4 = hn::LoadU(d4, wt + 4 * i);
      for (size_t s = 0; s < S; ++s) m[s] = hn::MulAdd(w4, hn::Set(d4, pairs[k & 1][s][0]), m[s]);
    }
  }
  for (size_t g = 0; g < Q; ++g) {
    for (size_t s = 0; s < S; ++s) {
      for (size_t v = 0; v < V; ++v) hn::StoreU(a[g][s][v], d, acc + g * ld_acc + s * gv + at[v]);
    }
  }
  if (first) {
    for (size_t s = 0; s < S; ++s) hn::StoreU(m[s], d4, mq + 4 * s);
  }
}

template <class D>
void ValueSumT(D d, const RunPlan& plan, const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, size_t head_dim,
               size_t n_rows, float* out, size_t ld_out) {
  constexpr size_t R = kBlockRows;
  const size_t gv = plan.n, ng = head_dim / gv, gb = 4 + plan.nb, rb = ng * gb, n_blocks = (n_w + 3) / 4;
  // One buffer that only grows: A (n_w rows of head_dim), M (per block of four queries and group,
  // four lanes), then the block's weights by fours and the products w * s of a block of four
  // queries (four per listed row and group, one row more: the first pass forms them a row ahead).
  const size_t n_a = n_w * head_dim, n_m = 4 * n_blocks * ng, need = n_a + n_m + 4 * n_blocks * R + 4 * ng * (R + 1);
  thread_local std::vector<float> buffer;
  thread_local std::vector<int32_t> idx;
  if (buffer.size() < need) buffer.resize(need);
  if (idx.size() < R + 16) idx.resize(R + 16);  // ActiveRows stores whole vectors; one more read
  float* acc = buffer.data();
  float* mq = acc + n_a;
  float* wt = mq + n_m;
  float* ws = wt + 4 * n_blocks * R;
  std::fill(acc, acc + n_a + n_m, 0.0f);
  size_t visited = 0;
  for (size_t j0 = 0; j0 < n_rows; j0 += R) {
    const size_t r = std::min(R, n_rows - j0);
    const size_t n_act = ActiveRows(w, n_w, ld_w, j0, r, idx.data());
    if (n_act == 0) continue;
    idx[n_act] = idx[n_act - 1];
    visited += n_act;
    const uint8_t* block = rows + j0 * rb;
    for (size_t b = 0; b < n_blocks; ++b) InterleaveFour(w + j0, n_w, ld_w, 4 * b, r, wt + 4 * b * R);
    InBlocksOfFour(n_w, [&](auto qblock, size_t g0) {
      constexpr size_t Q = decltype(qblock)::value;
      const size_t b = g0 / 4;
      ForEachValuePass<Q>(plan, ng, [&](auto vc, auto sc, size_t u0, size_t v0) {
        constexpr size_t V = decltype(vc)::value, S = decltype(sc)::value;
        WithLayout<V>(plan, [&](auto layout) {
          ValuePass<Q, V, S, decltype(layout)::value>(d, plan, u0, block + v0 * gb, gb, rb, idx.data(), n_act, ng,
                                                      wt + 4 * b * R, ws + 4 * v0, mq + (b * ng + v0) * 4,
                                                      acc + g0 * head_dim + v0 * gv, gv, head_dim);
        });
      });
    });
  }
  if (visited == 0) return;
  const size_t N = hn::Lanes(d);  // divides gv
  for (size_t g = 0; g < n_w; ++g) {
    for (size_t v = 0; v < ng; ++v) {
      const auto m = hn::Set(d, mq[(g / 4 * ng + v) * 4 + g % 4]);
      for (size_t c = v * gv; c < (v + 1) * gv; c += N) {
        float* o = out + g * ld_out + c;
        hn::StoreU(hn::Add(hn::LoadU(d, o), hn::Add(hn::LoadU(d, acc + g * head_dim + c), m)), d, o);
      }
    }
  }
}

#endif  // HWY_NATIVE_FMA

void KeyGroupDots(const float* q, size_t n_q, size_t ld_q, const uint8_t* key_group, int bits, size_t group,
                  size_t head_dim, float* out, size_t ld_out) {
#if HWY_NATIVE_FMA
  if (n_q == 0 || head_dim == 0) return;
  if (WithRunTag(bits, group, [&](auto d, const RunPlan& plan) {
        KeyDotsT(d, plan, q, n_q, ld_q, key_group, head_dim, out, ld_out);
      })) {
    return;
  }
#endif
  kivi_key_group_dots_scalar(q, n_q, ld_q, key_group, bits, group, head_dim, out, ld_out);
}

void ValuesWeightedSum(const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, int bits, size_t group,
                       size_t head_dim, size_t n_rows, float* out, size_t ld_out) {
#if HWY_NATIVE_FMA
  if (n_w == 0 || n_rows == 0 || head_dim == 0) return;
  if (WithRunTag(bits, kivi_value_group(group, head_dim), [&](auto d, const RunPlan& plan) {
        ValueSumT(d, plan, w, n_w, ld_w, rows, head_dim, n_rows, out, ld_out);
      })) {
    return;
  }
#endif
  kivi_values_weighted_sum_group_scalar(w, n_w, ld_w, rows, bits, group, head_dim, n_rows, out, ld_out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(KeyGroupDots);
HWY_EXPORT(ValuesWeightedSum);

const char* kivi_unfit(int bits, size_t group, size_t head_dim) {
  if (bits != 2 && bits != 4) return "KIVI stores 2- or 4-bit codes";
  if (group < 8 || group > 1024 || group % 8 != 0) return "the KIVI group must be a multiple of 8 in [8, 1024]";
  if (head_dim == 0) return "head_dim must be positive";
  if (head_dim >= group && head_dim % group != 0) return "head_dim must be a multiple of the KIVI group";
  if (head_dim * size_t(bits) % 8 != 0) return "head_dim * bits must be a multiple of 8 (whole bytes of codes)";
  return "";
}

namespace {

// The largest fp16 <= x (x finite, |x| <= 65504): the nearest one, stepped one ulp down in bit
// space when it lies above x. Zero is +0 (so that an all-zero group stores all-zero bytes).
uint16_t half_at_most(float x) {
  uint16_t h = f32_to_fp16(x);
  if (fp16_to_f32(h) > x) h = (h & 0x8000u) != 0 ? uint16_t(h + 1) : h == 0 ? uint16_t(0x8001) : uint16_t(h - 1);
  return h == 0x8000 ? uint16_t(0) : h;
}

// Min and scale of a group spanning [lo, hi]: m the largest fp16 <= lo, s the smallest fp16 with
// m + s * (2^b - 1) >= hi (0 when hi == lo). The test is exact in double: fp16 values are
// multiples of 2^-24 below 2^16, so m + s * L needs at most 44 bits.
void fit_range(float lo, float hi, int bits, uint16_t& m16, uint16_t& s16) {
  m16 = half_at_most(lo);
  s16 = 0;
  if (!(hi > lo)) return;
  const double m = fp16_to_f32(m16), levels = double((1 << bits) - 1);
  auto covers = [&](uint16_t s) { return m + double(fp16_to_f32(s)) * levels >= double(hi); };
  uint16_t s = f32_to_fp16(float((double(hi) - m) / levels));
  while (!covers(s)) ++s;  // positive fp16: the next one up is one bit higher
  while (s > 1 && covers(uint16_t(s - 1))) --s;
  s16 = s;
}

unsigned quantize(float x, float m, float s, int bits) {
  if (s == 0.0f) return 0;
  const float t = std::nearbyint((x - m) / s);  // ties to even
  return unsigned(std::clamp(t, 0.0f, float((1 << bits) - 1)));
}

// Packs n codes of b bits into a run (byte i % nb, bits b * (i / nb)).
void pack_run(const unsigned* codes, size_t n, int bits, uint8_t* run) {
  const size_t nb = n * size_t(bits) / 8;
  std::memset(run, 0, nb);
  for (size_t i = 0; i < n; ++i) run[i % nb] = uint8_t(run[i % nb] | (codes[i] << (unsigned(bits) * unsigned(i / nb))));
}

}  // namespace

void kivi_quantize_key_group(const float* rows, size_t ld, const uint8_t* include, int bits, size_t group,
                             size_t head_dim, uint8_t* dst) {
  // A channel with no included row: m = s = 0, codes 0.
  std::vector<float> lo(head_dim, 0.0f), hi(head_dim, 0.0f);
  bool any = false;
  for (size_t j = 0; j < group; ++j) {
    if (include != nullptr && include[j] == 0) continue;
    const float* x = rows + j * ld;
    for (size_t d = 0; d < head_dim; ++d) {
      lo[d] = any ? std::min(lo[d], x[d]) : x[d];
      hi[d] = any ? std::max(hi[d], x[d]) : x[d];
    }
    any = true;
  }
  const size_t nb = group * size_t(bits) / 8;
  std::vector<unsigned> codes(group);
  for (size_t d = 0; d < head_dim; ++d) {
    uint16_t m16, s16;
    fit_range(lo[d], hi[d], bits, m16, s16);
    store_u16(dst + 2 * d, m16);
    store_u16(dst + 2 * (head_dim + d), s16);
    const float m = fp16_to_f32(m16), s = fp16_to_f32(s16);
    for (size_t j = 0; j < group; ++j) {
      codes[j] = include != nullptr && include[j] == 0 ? 0 : quantize(rows[j * ld + d], m, s, bits);
    }
    pack_run(codes.data(), group, bits, dst + 4 * head_dim + d * nb);
  }
}

// x^ = m + s * q: s * q is exact in f32 (an fp16 times a 4-bit integer), so the sum rounds once,
// exactly as fma(s, q, m).
void kivi_load_key(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t j, float* out) {
  const size_t nb = group * size_t(bits) / 8;
  const uint8_t* runs = key_group + 4 * head_dim;
  for (size_t d = 0; d < head_dim; ++d) {
    const float m = kivi::half_at(key_group + 2 * d), s = kivi::half_at(key_group + 2 * (head_dim + d));
    out[d] = m + s * float(kivi::code_at(runs + d * nb, nb, bits, j));
  }
}

// A key group decoded channel by channel: put(d, channel) gets channel d's values from row
// `first` on (channel[j] is row first + j's).
template <class Put>
static void kivi_decode_key_channels(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t first,
                                     const Put& put) {
  const size_t nb = group * size_t(bits) / 8;
  const uint8_t* runs = key_group + 4 * head_dim;
  const unsigned mask = (1u << bits) - 1u;
  float channel[1024];  // group <= 1024 (kivi_unfit)
  for (size_t d = 0; d < head_dim; ++d) {
    const float m = kivi::half_at(key_group + 2 * d), s = kivi::half_at(key_group + 2 * (head_dim + d));
    const uint8_t* run = runs + d * nb;
    // Code k * nb + j sits in byte j at bits [k * b, k * b + b): whole runs of nb without a
    // division per code (the compiler vectorizes the inner loop).
    for (size_t k = 0; k < 8 / size_t(bits); ++k) {
      const auto shift = unsigned(k) * unsigned(bits);
      for (size_t j = 0; j < nb; ++j) channel[k * nb + j] = m + s * float((unsigned(run[j]) >> shift) & mask);
    }
    put(d, channel + first);
  }
}

void kivi_load_keys_transposed(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t first,
                               size_t count, float* out, size_t ld) {
  kivi_decode_key_channels(key_group, bits, group, head_dim, first,
                           [&](size_t d, const float* channel) { std::copy(channel, channel + count, out + d * ld); });
}

void kivi_load_keys(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t first, size_t count,
                    float* out) {
  kivi_decode_key_channels(key_group, bits, group, head_dim, first, [&](size_t d, const float* channel) {
    for (size_t j = 0; j < count; ++j) out[j * head_dim + d] = channel[j];
  });
}

void kivi_quantize_value_row(const float* x, int bits, size_t group, size_t head_dim, uint8_t* dst) {
  if (head_dim == 0) return;
  const size_t gv = kivi_value_group(group, head_dim), nb = gv * size_t(bits) / 8;
  std::vector<unsigned> codes(gv);
  for (size_t v = 0; v < head_dim / gv; ++v) {
    const float* xg = x + v * gv;
    uint8_t* g = dst + v * (4 + nb);
    const auto [lo, hi] = std::minmax_element(xg, xg + gv);
    uint16_t m16, s16;
    fit_range(*lo, *hi, bits, m16, s16);
    store_u16(g, m16);
    store_u16(g + 2, s16);
    const float m = fp16_to_f32(m16), s = fp16_to_f32(s16);
    for (size_t c = 0; c < gv; ++c) codes[c] = quantize(xg[c], m, s, bits);
    pack_run(codes.data(), gv, bits, g + 4);
  }
}

void kivi_load_value_row(const uint8_t* row, int bits, size_t group, size_t head_dim, float* out) {
  if (head_dim == 0) return;
  const size_t gv = kivi_value_group(group, head_dim), nb = gv * size_t(bits) / 8;
  for (size_t v = 0; v < head_dim / gv; ++v) {
    const uint8_t* g = row + v * (4 + nb);
    const float m = kivi::half_at(g), s = kivi::half_at(g + 2);
    for (size_t c = 0; c < gv; ++c) out[v * gv + c] = m + s * float(kivi::code_at(g + 4, nb, bits, c));
  }
}

void kivi_key_group_dots(const float* q, size_t n_q, size_t ld_q, const uint8_t* key_group, int bits, size_t group,
                         size_t head_dim, float* out, size_t ld_out) {
  HWY_DYNAMIC_DISPATCH(KeyGroupDots)(q, n_q, ld_q, key_group, bits, group, head_dim, out, ld_out);
}

void kivi_values_weighted_sum_group(const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, int bits,
                                    size_t group, size_t head_dim, size_t n_rows, float* out, size_t ld_out) {
  HWY_DYNAMIC_DISPATCH(ValuesWeightedSum)(w, n_w, ld_w, rows, bits, group, head_dim, n_rows, out, ld_out);
}

void kivi_key_group_dots_scalar(const float* q, size_t n_q, size_t ld_q, const uint8_t* key_group, int bits,
                                size_t group, size_t head_dim, float* out, size_t ld_out) {
  const size_t nb = group * size_t(bits) / 8;
  const uint8_t* runs = key_group + 4 * head_dim;
  std::vector<float> qs(head_dim);
  for (size_t g = 0; g < n_q; ++g) {
    const float* qg = q + g * ld_q;
    float c = 0.0f;
    for (size_t d = 0; d < head_dim; ++d) {
      c = std::fma(qg[d], kivi::half_at(key_group + 2 * d), c);
      qs[d] = qg[d] * kivi::half_at(key_group + 2 * (head_dim + d));
    }
    for (size_t j = 0; j < group; ++j) {
      float a = 0.0f;
      for (size_t d = 0; d < head_dim; ++d) a = std::fma(qs[d], float(kivi::code_at(runs + d * nb, nb, bits, j)), a);
      out[g * ld_out + j] = c + a;
    }
  }
}

void kivi_values_weighted_sum_group_scalar(const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, int bits,
                                           size_t group, size_t head_dim, size_t n_rows, float* out, size_t ld_out) {
  if (n_w == 0 || head_dim == 0) return;
  const size_t gv = kivi_value_group(group, head_dim), nb = gv * size_t(bits) / 8, ng = head_dim / gv;
  const size_t rb = kivi_value_row_bytes(bits, group, head_dim);
  // A (n_w rows of head_dim) and M (n_w rows of ng), in a buffer that only grows.
  thread_local std::vector<float> buffer;
  buffer.assign(n_w * (head_dim + ng), 0.0f);
  float* acc = buffer.data();
  float* mq = acc + n_w * head_dim;
  bool visited = false;
  for (size_t j = 0; j < n_rows; ++j) {
    bool any = false;
    for (size_t g = 0; g < n_w; ++g) any = any || w[g * ld_w + j] != 0.0f;
    if (!any) continue;
    visited = true;
    for (size_t v = 0; v < ng; ++v) {
      const uint8_t* grp = rows + j * rb + v * (4 + nb);
      const float m = kivi::half_at(grp), s = kivi::half_at(grp + 2);
      for (size_t g = 0; g < n_w; ++g) {
        const float wg = w[g * ld_w + j], ws = wg * s;
        mq[g * ng + v] = std::fma(wg, m, mq[g * ng + v]);
        float* a = acc + g * head_dim + v * gv;
        for (size_t c = 0; c < gv; ++c) a[c] = std::fma(ws, float(kivi::code_at(grp + 4, nb, bits, c)), a[c]);
      }
    }
  }
  if (!visited) return;
  for (size_t g = 0; g < n_w; ++g) {
    for (size_t c = 0; c < head_dim; ++c) {
      out[g * ld_out + c] = out[g * ld_out + c] + (acc[g * head_dim + c] + mq[g * ng + c / gv]);
    }
  }
}

}  // namespace squeezekv
#endif  // HWY_ONCE
