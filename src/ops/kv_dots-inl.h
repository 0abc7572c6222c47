// The drivers the K/V row kernels share, included by each kernel file inside its per-target
// namespace (each target pass includes it again, hence no include guard; the file includes
// <algorithm>, <type_traits>, <utility> and ops/stream_prefetch.h before hwy/foreach_target.h).
// Needs query_blocks-inl.h first.

// Rows stream from memory in a long decode step (a head's keys and values outgrow the caches from
// a few thousand rows): the kernels ask for them ahead (ops/stream_prefetch.h), the key dots once
// per block of rows, the value sums once per kPrefetchRows rows.
constexpr size_t kPrefetchRows = 4;

// f(j) for each row j < n_rows in order, asking for the rows ahead once per kPrefetchRows rows
// when `ask` (a tile's first pass over the rows; later passes find them in cache).
template <class F>
HWY_INLINE void ForRowsAskingAhead(const void* rows, size_t row_bytes, size_t n_rows, bool ask, const F& f) {
  for (size_t j0 = 0; j0 < n_rows; j0 += kPrefetchRows) {
    if (ask) prefetch_ahead(static_cast<const uint8_t*>(rows) + j0 * row_bytes, kPrefetchRows * row_bytes);
    for (size_t j = j0; j < std::min(n_rows, j0 + kPrefetchRows); ++j) f(j);
  }
}

// Dot products end in a horizontal sum of a vector's lanes; one per (row, query) costs more than
// the row's multiply-adds. LaneSums adds up N vectors at once into the N lanes of one vector
// (lane k = the sum of vector k's lanes): log2(N) levels, each pairing vectors by a blend, a
// lane permutation and an add. Every lane's sum is the same balanced tree over its vector's lanes
// in lane order ((v0 + v1) + (v2 + v3)) + ..., whichever vectors it is summed with, so a row's dot
// does not depend on the rows beside it in a block.
template <class D>
struct LaneSums {
  static constexpr size_t kLanes = hn::MaxLanes(D());
  static constexpr size_t kLevels = kLanes >= 16 ? 4 : kLanes >= 8 ? 3 : kLanes >= 4 ? 2 : kLanes >= 2 ? 1 : 0;
  hn::Mask<D> upper[4];  // lanes whose level bit is set
  using Indices = decltype(hn::IndicesFromVec(D(), hn::Zero(hn::RebindToUnsigned<D>())));
  Indices partner[4];  // lane i <- lane i ^ level bit

  explicit LaneSums(D d) {
    const hn::RebindToUnsigned<D> du;
    const auto iota = hn::Iota(du, 0);
    for (size_t k = 0; k < kLevels; ++k) {
      const auto bit = hn::Set(du, uint32_t{1} << k);
      upper[k] = hn::RebindMask(d, hn::TestBit(iota, bit));
      partner[k] = hn::IndicesFromVec(d, hn::Xor(iota, bit));
    }
  }
  // v[0..kLanes) in, destroyed; returns the vector of their lane sums.
  HWY_INLINE hn::Vec<D> operator()(hn::Vec<D>* v) const {
    // Unrolled whole, so that v stays in registers.
#pragma GCC unroll 4
    for (size_t k = 0; k < kLevels; ++k) {
      const size_t count = kLanes >> k;
#pragma GCC unroll 8
      for (size_t i = 0; i < count / 2; ++i) {
        const auto a = v[2 * i], b = v[2 * i + 1];
        v[i] =
            hn::Add(hn::IfThenElse(upper[k], b, a), hn::TableLookupLanes(hn::IfThenElse(upper[k], a, b), partner[k]));
      }
    }
    return v[0];
  }
};

// f(r) for r < count: with a constant count (std::integral_constant), unrolled with r constant,
// so that the code indexing registers by r keeps them in registers; else a plain loop.
template <class Count, class F>
HWY_INLINE void ForEachRow(Count count, const F& f) {
  if constexpr (std::is_integral_v<Count>) {
    for (size_t r = 0; r < count; ++r) f(r);
  } else {
    [&]<size_t... r>(std::index_sequence<r...>) { (f(std::integral_constant<size_t, r>()), ...); }
    (std::make_index_sequence<Count::value>());
  }
}

// Dots of G queries with every row, kLanes / G = R rows a block: block_dot(acc, j, count) adds
// the lanes of query g's dot with row j + r to acc[g * R + r] for r < count; one LaneSums per block
// then writes out[g * ld_out + j + r]. Full blocks pass count as a constant, so the row loop
// unrolls and the accumulators stay in registers; the last, shorter block leaves the missing rows'
// vectors zero.
template <size_t G, class D, class BlockDot>
HWY_INLINE void DotsInLaneBlocks(D d, size_t n_rows, float* out, size_t ld_out, const BlockDot& block_dot) {
  constexpr size_t N = LaneSums<D>::kLanes, R = N / G;
  static_assert(R >= 1, "a block holds at least one row per query");
  const LaneSums<D> sums(d);
  HWY_ALIGN float lanes[N];
  for (size_t j = 0; j < n_rows; j += R) {
    const size_t here = std::min(R, n_rows - j);
    hn::Vec<D> acc[N];
    for (size_t k = 0; k < N; ++k) acc[k] = hn::Zero(d);
    if (here == R) block_dot(acc, j, std::integral_constant<size_t, R>());
    else block_dot(acc, j, here);
    hn::Store(sums(acc), d, lanes);
    for (size_t g = 0; g < G; ++g) std::copy(lanes + g * R, lanes + g * R + here, out + g * ld_out + j);
  }
}
