// The kernels of the float formats (one value per element: f16, f32) for a format `Fmt` giving
//   static constexpr KVType kType;
//   template <class D> static hn::Vec<D> Load(D d, const void* rows, size_t offset);  // as f32
//   static float LoadOne(const void* rows, size_t offset);
// Included by each float format's kernel file inside its per-target namespace (each target pass
// includes it again, hence no include guard), after query_blocks-inl.h and kv_dots-inl.h.

// dst[0..n) = the stored values as f32.
template <class Fmt>
void FloatLoadRows(const void* src, float* dst, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Fmt::Load(d, src, i), d, dst + i);
  for (; i < n; ++i) dst[i] = Fmt::LoadOne(src, i);
}

// Up to 4 queries per pass (one row load serves them); wider groups take several passes. When the
// lanes divide the row, blocks of rows end in one LaneSums instead of a horizontal sum per dot.
template <size_t G, class Fmt, class D>
HWY_INLINE void RowDotsGroupPass(D d, const float* q, size_t ld_q, const void* rows, size_t n_rows, size_t dim,
                                 float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  if constexpr (LaneSums<D>::kLanes >= 4) {
    if (dim % N == 0) {
      constexpr size_t R = LaneSums<D>::kLanes / G;
      const size_t rb = kv_row_bytes(Fmt::kType, dim);
      DotsInLaneBlocks<G>(d, n_rows, out, ld_out, [&](hn::Vec<D>* acc, size_t j, auto count) {
        prefetch_ahead(static_cast<const uint8_t*>(rows) + j * rb, size_t(count) * rb);
        for (size_t i = 0; i < dim; i += N) {
          ForEachRow(count, [&](auto r) {
            const auto row = Fmt::Load(d, rows, (j + r) * dim + i);
            for (size_t g = 0; g < G; ++g)
              acc[g * R + r] = hn::MulAdd(hn::LoadU(d, q + g * ld_q + i), row, acc[g * R + r]);
          });
        }
      });
      return;
    }
  }
  const size_t vec_end = dim - dim % N;
  for (size_t j = 0; j < n_rows; ++j) {
    hn::Vec<D> acc[G];
    for (size_t g = 0; g < G; ++g) acc[g] = hn::Zero(d);
    for (size_t i = 0; i < vec_end; i += N) {
      const auto row = Fmt::Load(d, rows, j * dim + i);
      for (size_t g = 0; g < G; ++g) acc[g] = hn::MulAdd(hn::LoadU(d, q + g * ld_q + i), row, acc[g]);
    }
    for (size_t g = 0; g < G; ++g) {
      float s = hn::GetLane(hn::SumOfLanes(d, acc[g]));
      for (size_t i = vec_end; i < dim; ++i) s += q[g * ld_q + i] * Fmt::LoadOne(rows, j * dim + i);
      out[g * ld_out + j] = s;
    }
  }
}

template <class Fmt, class D>
void RowDotsGroupT(D d, const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim,
                   float* out, size_t ld_out) {
  InBlocksOfFour(n_q, [&](auto block, size_t g) {
    RowDotsGroupPass<decltype(block)::value, Fmt>(d, q + g * ld_q, ld_q, rows, n_rows, dim, out + g * ld_out, ld_out);
  });
}

// out[g * ld_out + i] += sum_j w[g * ld_w + j] * row j over the kVecs vectors from element i0:
// rows outer, so each row is read once, in order, while the G x kVecs accumulators stay in
// registers (columns outer read the rows once per vector: four strided passes over a 64-wide head).
// Every element still adds its rows in row order, so the sums are the same bits either way.
template <size_t G, size_t kVecs, class Fmt, class D>
HWY_INLINE void WeightedSumTile(D d, const float* w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                                size_t i0, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  hn::Vec<D> acc[G][kVecs];
  for (size_t g = 0; g < G; ++g) {
    for (size_t v = 0; v < kVecs; ++v) acc[g][v] = hn::LoadU(d, out + g * ld_out + i0 + v * N);
  }
  ForRowsAskingAhead(rows, kv_row_bytes(Fmt::kType, dim), n_rows, i0 == 0, [&](size_t j) {
    if (!AnyWeight<G>(w, ld_w, j)) return;
    hn::Vec<D> x[kVecs];
    for (size_t v = 0; v < kVecs; ++v) x[v] = Fmt::Load(d, rows, j * dim + i0 + v * N);
    for (size_t g = 0; g < G; ++g) {
      const auto wg = hn::Set(d, w[g * ld_w + j]);
      for (size_t v = 0; v < kVecs; ++v) acc[g][v] = hn::MulAdd(wg, x[v], acc[g][v]);
    }
  });
  for (size_t g = 0; g < G; ++g) {
    for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[g][v], d, out + g * ld_out + i0 + v * N);
  }
}

template <size_t G, class Fmt, class D>
HWY_INLINE void WeightedSumGroupPass(D d, const float* w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                                     float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t vecs = dim / N, vec_end = vecs * N;
  constexpr size_t kWide = kVectorsPerQuery<G>;
  size_t v0 = 0;
  for (; v0 + kWide <= vecs; v0 += kWide)
    WeightedSumTile<G, kWide, Fmt>(d, w, ld_w, rows, n_rows, dim, v0 * N, out, ld_out);
  for (; v0 + 2 <= vecs; v0 += 2) WeightedSumTile<G, 2, Fmt>(d, w, ld_w, rows, n_rows, dim, v0 * N, out, ld_out);
  for (; v0 < vecs; ++v0) WeightedSumTile<G, 1, Fmt>(d, w, ld_w, rows, n_rows, dim, v0 * N, out, ld_out);
  for (size_t i = vec_end; i < dim; ++i) {
    for (size_t g = 0; g < G; ++g) {
      float acc = out[g * ld_out + i];
      for (size_t j = 0; j < n_rows; ++j) {
        if (AnyWeight<G>(w, ld_w, j)) acc += w[g * ld_w + j] * Fmt::LoadOne(rows, j * dim + i);
      }
      out[g * ld_out + i] = acc;
    }
  }
}

template <class Fmt, class D>
void WeightedSumGroupT(D d, const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                       float* out, size_t ld_out) {
  WeightedSumsInTiles(w, n_w, ld_w, rows, n_rows, kv_row_bytes(Fmt::kType, dim), out, ld_out,
                      [&](auto block, const float* wg, const uint8_t* tile, size_t count, float* og) {
                        WeightedSumGroupPass<decltype(block)::value, Fmt>(d, wg, ld_w, tile, count, dim, og, ld_out);
                      });
}

// Float rows turned back in registers and dotted in blocks of rows (DotsInLaneBlocks): element i
// of a row's first n_rot is x[i] * cs[i] + partner[i] * sn[i] (the partner: the pair's other lane,
// for neox the element half away), the products and their order RotateRowsBack's then
// RowDotsGroupPass's, so the logits are those of turning into a scratch and dotting it, bit for
// bit, without the scratch. Needs N | dim and N | n_rot (neox: N | n_rot / 2).
template <size_t G, class Fmt, class D>
HWY_INLINE void TurnedDotsPass(D d, const float* q, size_t ld_q, const void* rows, const int32_t* shifts, size_t n_rows,
                               size_t dim, size_t n_rot, bool neox, const float* turns, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t half = n_rot / 2;
  constexpr size_t R = LaneSums<D>::kLanes / G;
  DotsInLaneBlocks<G>(d, n_rows, out, ld_out, [&](hn::Vec<D>* acc, size_t j, auto count) {
    ForEachRow(count, [&](auto r) {
      const size_t row = (j + r) * dim;
      const int32_t shift = shifts[j + r];
      const float* cs = turns + size_t(shift > 0 ? shift : 0) * 2 * n_rot;
      const float* sn = cs + n_rot;
      for (size_t i = 0; i < dim; i += N) {
        auto x = Fmt::Load(d, rows, row + i);
        if (shift > 0 && i < n_rot) {
          const auto partner = !neox ? hn::Reverse2(d, x) : Fmt::Load(d, rows, row + (i < half ? i + half : i - half));
          x = hn::Add(hn::Mul(x, hn::LoadU(d, cs + i)), hn::Mul(partner, hn::LoadU(d, sn + i)));
        }
        for (size_t g = 0; g < G; ++g) acc[g * R + r] = hn::MulAdd(hn::LoadU(d, q + g * ld_q + i), x, acc[g * R + r]);
      }
    });
  });
}
// f(tag): full vectors, or 8 lanes when a row is narrower than the target's.
template <class F>
HWY_INLINE auto WithFloatTag(size_t dim, const F& f) {
  const hn::ScalableTag<float> d;
  return dim < hn::Lanes(d) ? f(hn::CappedTag<float, 8>()) : f(d);
}

template <class Fmt>
void FloatDotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim, float* out,
                    size_t ld_out) {
  WithFloatTag(dim, [&](auto d) { RowDotsGroupT<Fmt>(d, q, n_q, ld_q, rows, n_rows, dim, out, ld_out); });
}

template <class Fmt>
void FloatWeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                           float* out, size_t ld_out) {
  WithFloatTag(dim, [&](auto d) { WeightedSumGroupT<Fmt>(d, w, n_w, ld_w, rows, n_rows, dim, out, ld_out); });
}

// Dots of n_q queries against keys turned back by their shifts, in registers, where the vectors
// fit the row and its rotated part; false (nothing written) where they do not.
template <class Fmt>
bool FloatTurnedDots(const float* q, size_t n_q, size_t ld_q, const void* rows, const int32_t* shifts, size_t n_rows,
                     size_t dim, size_t n_rot, bool neox, const float* turns, float* out, size_t ld_out) {
  auto turned_dots = [&](auto d) {
    const size_t N = hn::Lanes(d);
    if constexpr (LaneSums<decltype(d)>::kLanes >= 4) {
      if (dim % N == 0 && n_rot <= dim && (neox ? (n_rot / 2) % N == 0 : n_rot % N == 0)) {
        InBlocksOfFour(n_q, [&](auto block, size_t g) {
          TurnedDotsPass<decltype(block)::value, Fmt>(d, q + g * ld_q, ld_q, rows, shifts, n_rows, dim, n_rot, neox,
                                                      turns, out + g * ld_out, ld_out);
        });
        return true;
      }
    }
    return false;
  };
  return WithFloatTag(dim, turned_dots);
}
