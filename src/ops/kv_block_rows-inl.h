// The kernels of the block formats (q8_0, q4_0), decoding codes in registers, for a format `Fmt`
// giving
//   static constexpr KVType kType;  // its row of kKVFormats: block, header_bytes, code_bits
//   template <class D> static auto Header(D d, const uint8_t* block);  // its scales, broadcast
//   template <class D, class H>
//   static void Decode(D d, const H& header, const uint8_t* codes, hn::Vec<D>* x);
// Decode turns N code bytes at `codes` into kParts = 8 / code_bits vectors of values: x[k] holds
// the elements w + k * B / kParts of the block when `codes` is its code byte w (q8_0: one vector
// of N int8 codes; q4_0: the low nibbles' elements w.. and the high ones' w + B/2..), each value
// rounded once as the scalar codec decodes it, so that SIMD and scalar twins give the same floats.
// Included by each block format's kernel file inside its per-target namespace (each target pass
// includes it again, hence no include guard), after query_blocks-inl.h and kv_dots-inl.h.
//
// A kernel walks each row block by block; a vector of N lanes never crosses a block (N divides
// B / kParts), so WithBlockTag picks the widest of full, 8, 4 and 1 lanes that divides the block.

// A block's fp16 scale d at `blk`, broadcast (the target's f16 conversion: vcvtph2ps where it has
// F16C; the same value as fp16_to_f32).
template <class D>
HWY_INLINE hn::Vec<D> BlockScale(D d, const uint8_t* blk) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::Set(d, hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(blk)))));
}

template <class Fmt>
constexpr size_t kBlockParts = 8 / kv_format(Fmt::kType).code_bits;
template <class Fmt>
constexpr size_t kBlockHeader = kv_format(Fmt::kType).header_bytes;

template <class Fmt, class D>
HWY_INLINE bool BlockFits(D d, size_t B) {
  return (B / kBlockParts<Fmt>) % hn::Lanes(d) == 0;
}

// Runs f(tag) with the widest tag whose lanes fit the format's blocks.
template <class Fmt, class F>
HWY_INLINE void WithBlockTag(size_t dim, const F& f) {
  const size_t B = kv_block_size(Fmt::kType, dim);
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 8> d8;
  const hn::CappedTag<float, 4> d4;
  if (BlockFits<Fmt>(d, B)) return f(d);
  if (BlockFits<Fmt>(d8, B)) return f(d8);
  if (BlockFits<Fmt>(d4, B)) return f(d4);
  f(hn::CappedTag<float, 1>());
}

// acc[g * R + r] += the lanes of dot(q + g * ld_q, row r) for g < G, r < count (rows rb bytes
// apart): block by block, each code vector decoded and scaled once serves the G queries.
template <size_t G, size_t R, class Fmt, class D, class Count>
HWY_INLINE void BlockDotRows(D d, const float* q, size_t ld_q, const uint8_t* rows, size_t rb, Count count, size_t dim,
                             size_t B, hn::Vec<D>* acc) {
  constexpr size_t kParts = kBlockParts<Fmt>;
  const size_t N = hn::Lanes(d);
  const size_t block_bytes = kv_block_bytes(Fmt::kType, dim);
  const size_t part = B / kParts;
  for (size_t b = 0; b < dim / B; ++b) {
    const float* qb = q + b * B;
    ForEachRow(count, [&](auto r) {
      const uint8_t* blk = rows + r * rb + b * block_bytes;
      const auto header = Fmt::Header(d, blk);
      for (size_t w = 0; w < part; w += N) {
        hn::Vec<D> x[kParts];
        Fmt::Decode(d, header, blk + kBlockHeader<Fmt> + w, x);
        // Parts outer, queries inner: each accumulator still adds its parts in order.
#pragma GCC unroll 4
        for (size_t k = 0; k < kParts; ++k) {
#pragma GCC unroll 4
          for (size_t g = 0; g < G; ++g) {
            acc[g * R + r] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w + k * part), x[k], acc[g * R + r]);
          }
        }
      }
    });
  }
}

template <class Fmt, class D>
void BlockDotsGroupT(D d, const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim,
                     float* out, size_t ld_out) {
  const size_t B = kv_block_size(Fmt::kType, dim), rb = kv_row_bytes(Fmt::kType, dim);
  const auto* base = static_cast<const uint8_t*>(rows);
  InBlocksOfFour(n_q, [&](auto block, size_t g) {
    constexpr size_t G = decltype(block)::value;
    if constexpr (LaneSums<D>::kLanes >= 4) {
      constexpr size_t R = LaneSums<D>::kLanes / G;
      DotsInLaneBlocks<G>(d, n_rows, out + g * ld_out, ld_out, [&](hn::Vec<D>* acc, size_t j, auto count) {
        prefetch_ahead(base + j * rb, size_t(count) * rb);
        BlockDotRows<G, R, Fmt>(d, q + g * ld_q, ld_q, base + j * rb, rb, count, dim, B, acc);
      });
    } else {  // one or two lanes: a row at a time
      for (size_t j = 0; j < n_rows; ++j) {
        hn::Vec<D> acc[G];
        for (size_t i = 0; i < G; ++i) acc[i] = hn::Zero(d);
        BlockDotRows<G, 1, Fmt>(d, q + g * ld_q, ld_q, base + j * rb, rb, std::integral_constant<size_t, 1>(), dim, B,
                                acc);
        for (size_t i = 0; i < G; ++i) out[(g + i) * ld_out + j] = hn::GetLane(hn::SumOfLanes(d, acc[i]));
      }
    }
  });
}

// out[g * ld_out + i] += sum_j w[g * ld_w + j] * row j over the elements of vectors [v0, v0 + kVecs)
// (v0 a multiple of kParts) of blocks [b0, b0 + kBlocks) (kBlocks > 1: whole blocks, v0 = 0): rows
// outer, each row read once, while the G x kBlocks x kVecs accumulators stay in registers; each
// code vector is decoded and scaled once and serves the G queries.
template <size_t G, size_t kBlocks, size_t kVecs, class Fmt, class D>
HWY_INLINE void BlockWeightedSumBlock(D d, const float* w, size_t ld_w, const uint8_t* base, size_t rb, size_t n_rows,
                                      size_t dim, size_t B, size_t b0, size_t v0, float* out, size_t ld_out) {
  constexpr size_t kParts = kBlockParts<Fmt>;
  const size_t N = hn::Lanes(d);
  const size_t block_bytes = kv_block_bytes(Fmt::kType, dim);
  const size_t part = B / kParts;
  // Element offsets of the block's kVecs vectors: vector v is part v % kParts of code bytes
  // ((v0 + v) / kParts) * N.
  hn::Vec<D> acc[G][kBlocks][kVecs];
  auto offset = [&](size_t k, size_t v) { return (b0 + k) * B + ((v0 + v) / kParts) * N + (v % kParts) * part; };
  for (size_t g = 0; g < G; ++g) {
    for (size_t k = 0; k < kBlocks; ++k) {
      for (size_t v = 0; v < kVecs; ++v) acc[g][k][v] = hn::LoadU(d, out + g * ld_out + offset(k, v));
    }
  }
  ForRowsAskingAhead(base, rb, n_rows, b0 == 0 && v0 == 0, [&](size_t j) {
    if (!AnyWeight<G>(w, ld_w, j)) return;
    hn::Vec<D> wg[G];
    for (size_t g = 0; g < G; ++g) wg[g] = hn::Set(d, w[g * ld_w + j]);
    for (size_t k = 0; k < kBlocks; ++k) {
      const uint8_t* blk = base + j * rb + (b0 + k) * block_bytes;
      const auto header = Fmt::Header(d, blk);
      hn::Vec<D> x[kVecs];
      for (size_t v = 0; v < kVecs; ++v) x[v] = hn::Zero(d);  // (every one is set below)
      if constexpr (kVecs % kParts == 0) {
        for (size_t v = 0; v < kVecs; v += kParts) {
          Fmt::Decode(d, header, blk + kBlockHeader<Fmt> + ((v0 + v) / kParts) * N, x + v);
        }
      }
      for (size_t g = 0; g < G; ++g) {
        for (size_t v = 0; v < kVecs; ++v) acc[g][k][v] = hn::MulAdd(wg[g], x[v], acc[g][k][v]);
      }
    }
  });
  for (size_t g = 0; g < G; ++g) {
    for (size_t k = 0; k < kBlocks; ++k) {
      for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[g][k][v], d, out + g * ld_out + offset(k, v));
    }
  }
}

// The rows weighted for G queries (w and out at their first query).
template <size_t G, class Fmt, class D>
HWY_INLINE void BlockWeightedSumPass(D d, const float* wg, size_t ld_w, const uint8_t* base, size_t n_rows, size_t dim,
                                     float* og, size_t ld_out) {
  const size_t B = kv_block_size(Fmt::kType, dim), rb = kv_row_bytes(Fmt::kType, dim);
  // Vectors per block: B / N (WithBlockTag's lanes divide the block's parts), in passes of at most
  // 8 (a block of B = 32 with 16 lanes: one pass of 2).
  const size_t vecs = B / hn::Lanes(d);
  const size_t n_blocks = dim / B;
  size_t b = 0;
  // Two or four whole blocks a pass where their vectors' accumulators fit (a 64-wide head of
  // q8_0 or q4_0 at 16 lanes: the whole row in one pass), so each row is read once.
  if constexpr (G * 4 * 2 <= kAccumulators) {
    if (vecs == 2) {
      for (; b + 4 <= n_blocks; b += 4) {
        BlockWeightedSumBlock<G, 4, 2, Fmt>(d, wg, ld_w, base, rb, n_rows, dim, B, b, 0, og, ld_out);
      }
    }
  }
  if constexpr (G * 2 * 2 <= kAccumulators) {
    if (vecs == 2) {
      for (; b + 2 <= n_blocks; b += 2) {
        BlockWeightedSumBlock<G, 2, 2, Fmt>(d, wg, ld_w, base, rb, n_rows, dim, B, b, 0, og, ld_out);
      }
    }
  }
  for (; b < n_blocks; ++b) {
    for (size_t v0 = 0; v0 < vecs;) {
      const size_t left = vecs - v0;
      if (left >= 8 && kVectorsPerQuery<G> >= 8) {
        BlockWeightedSumBlock<G, 1, 8, Fmt>(d, wg, ld_w, base, rb, n_rows, dim, B, b, v0, og, ld_out);
        v0 += 8;
      } else if (left >= 4 && kVectorsPerQuery<G> >= 4) {
        BlockWeightedSumBlock<G, 1, 4, Fmt>(d, wg, ld_w, base, rb, n_rows, dim, B, b, v0, og, ld_out);
        v0 += 4;
      } else if (left >= 2) {
        BlockWeightedSumBlock<G, 1, 2, Fmt>(d, wg, ld_w, base, rb, n_rows, dim, B, b, v0, og, ld_out);
        v0 += 2;
      } else {  // one code byte vector per part: only where kParts is 1 (vecs is a multiple of kParts)
        BlockWeightedSumBlock<G, 1, 1, Fmt>(d, wg, ld_w, base, rb, n_rows, dim, B, b, v0, og, ld_out);
        v0 += 1;
      }
    }
  }
}

template <class Fmt, class D>
void BlockWeightedSumGroupT(D d, const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                            float* out, size_t ld_out) {
  WeightedSumsInTiles(w, n_w, ld_w, rows, n_rows, kv_row_bytes(Fmt::kType, dim), out, ld_out,
                      [&](auto block, const float* wg, const uint8_t* tile, size_t count, float* og) {
                        BlockWeightedSumPass<decltype(block)::value, Fmt>(d, wg, ld_w, tile, count, dim, og, ld_out);
                      });
}

// Rows decoded in registers: each value rounded once, as the scalar codec decodes it.
template <class Fmt, class D>
void BlockLoadRowsT(D d, const uint8_t* src, float* dst, size_t n_rows, size_t dim) {
  constexpr size_t kParts = kBlockParts<Fmt>;
  const size_t N = hn::Lanes(d);
  const size_t B = kv_block_size(Fmt::kType, dim), rb = kv_row_bytes(Fmt::kType, dim);
  const size_t block_bytes = kv_block_bytes(Fmt::kType, dim), part = B / kParts;
  for (size_t r = 0; r < n_rows; ++r) {
    for (size_t b = 0; b < dim / B; ++b) {
      const uint8_t* blk = src + r * rb + b * block_bytes;
      float* o = dst + r * dim + b * B;
      const auto header = Fmt::Header(d, blk);
      for (size_t w = 0; w < part; w += N) {
        hn::Vec<D> x[kParts];
        Fmt::Decode(d, header, blk + kBlockHeader<Fmt> + w, x);
        for (size_t k = 0; k < kParts; ++k) hn::StoreU(x[k], d, o + w + k * part);
      }
    }
  }
}

// The entry points of a block format's table row (dim > 0).
template <class Fmt>
void BlockLoadRows(const void* src, float* dst, size_t n, size_t dim) {
  WithBlockTag<Fmt>(dim, [&](auto d) { BlockLoadRowsT<Fmt>(d, static_cast<const uint8_t*>(src), dst, n / dim, dim); });
}
template <class Fmt>
void BlockDotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim, float* out,
                    size_t ld_out) {
  WithBlockTag<Fmt>(dim, [&](auto d) { BlockDotsGroupT<Fmt>(d, q, n_q, ld_q, rows, n_rows, dim, out, ld_out); });
}
template <class Fmt>
void BlockWeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                           float* out, size_t ld_out) {
  WithBlockTag<Fmt>(dim, [&](auto d) { BlockWeightedSumGroupT<Fmt>(d, w, n_w, ld_w, rows, n_rows, dim, out, ld_out); });
}
