// matvec throughput per weight type: SIMD with 1 and 2 threads next to the scalar twin, on the
// 2048x2048 and 8192x2048 (rows x cols) shapes of a small Llama's attention and FFN matrices.
// bytes_per_second counts weight bytes read, so it compares directly with memory bandwidth.
// matmul: the same shapes against 1 token, 8 and 16 (a server's batched decode step) and 128 (a
// prompt chunk), from the GGUF rows and (/repacked) from the repacked layout, reported as int8
// GOP/s (two per
// multiply-add), next to int8_peak: the machine's vpdpbusd throughput measured by a loop of
// independent instructions (AVX512-VNNI CPUs only), the ceiling of the prompt tiles.
// kv/ and kivi/: one decode step's reads of one KV head at the 1B model's shape (4096 cached rows,
// head_dim 64, a GQA group of 4 query heads; 1 for the latency-bound case): the key dots and the
// weighted value sum over f16, q8_0 and q4_0 rows (row_dots_group, rows_weighted_sum_group) next to the same over
// KIVI codes of 2 and 4 bits in groups of G = 32 (kivi_key_group_dots once per key group,
// kivi_values_weighted_sum_group over every row). bytes_per_second counts the stored bytes read.
// kv_from_memory/: the same two kernels over every KV head of the 1B model at depth 4096 (16 layers
// x 8 heads x 4096 rows: 64 MiB of f16 keys, more than the L3 holds), each head read once per
// iteration as in a decode step: the figure a real step sees, where the cache-resident ones above
// hide how often a kernel walks its rows.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/ops/kivi_rows.h"
#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/tensor_type.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

constexpr int64_t n_cols = 2048;

// A rows x cols matrix of N(0, 0.02) weights in `type`, drawn from rng.
std::vector<uint8_t> random_matrix(TensorType type, int64_t n_rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t stride = row_bytes(type, cols);
  std::vector<uint8_t> bytes(stride * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (float& v : row) v = normal(rng);
    quantize_row(type, row.data(), bytes.data() + static_cast<size_t>(r) * stride, cols);
  }
  return bytes;
}

// w's repacked layout (repacked_weights.h), as the loader builds it on VNNI CPUs.
RepackedBuffer repack_whole(const WeightMatrix& w) {
  RepackedBuffer buffer = allocate_repacked(w);
  repack_groups(w, 0, (w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows, buffer.get());
  return buffer;
}

// Weights are built once per (type, rows) and shared by every benchmark of that shape.
const std::vector<uint8_t>& weights(TensorType type, int64_t n_rows) {
  static std::map<std::pair<TensorType, int64_t>, std::vector<uint8_t>> cache;
  auto [it, inserted] = cache.try_emplace({type, n_rows});
  if (inserted) {
    std::mt19937 rng(42);
    it->second = random_matrix(type, n_rows, n_cols, rng);
  }
  return it->second;
}

void bm_matvec(benchmark::State& state, TensorType type, int64_t n_rows, int threads, bool simd) {
  const std::vector<uint8_t>& bytes = weights(type, n_rows);
  const WeightMatrix w{bytes.data(), type, n_rows, n_cols};
  std::vector<float> x(n_cols), y(static_cast<size_t>(n_rows));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  for (auto _ : state) {
    if (simd) {
      matvec(w, x.data(), y.data(), pool.get());
    } else {
      matvec_scalar(w, x.data(), y.data());
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
}

// The repacked layout of weights(type, n_rows) (repacked_weights.h), built once.
const uint8_t* repacked(TensorType type, int64_t n_rows) {
  static std::map<std::pair<TensorType, int64_t>, RepackedBuffer> cache;
  auto [it, inserted] = cache.try_emplace({type, n_rows});
  if (inserted) {
    it->second = repack_whole(WeightMatrix{weights(type, n_rows).data(), type, n_rows, n_cols});
  }
  return it->second.get();
}

void bm_matmul(benchmark::State& state, TensorType type, int64_t n_rows, int64_t n_tok, int threads, bool repack) {
  const std::vector<uint8_t>& bytes = weights(type, n_rows);
  WeightMatrix w{bytes.data(), type, n_rows, n_cols};
  if (repack) {
    if (!can_repack(w)) return state.SkipWithError("this CPU has no AVX-512 VNNI: nothing is repacked");
    w.repacked = repacked(type, n_rows);
  }
  std::vector<float> x(static_cast<size_t>(n_cols * n_tok)), y(static_cast<size_t>(n_rows * n_tok));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  for (auto _ : state) {
    matmul(w, x.data(), n_tok, y.data(), pool.get());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GOP/s"] = benchmark::Counter(2.0 * double(n_rows * n_cols * n_tok) * double(state.iterations()) / 1e9,
                                               benchmark::Counter::kIsRate);
  state.counters["weights GB/s"] =
      benchmark::Counter(double(bytes.size()) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// family/TYPE/ROWSxCOLS[/repacked]/tokens:N/threads:T, timed in milliseconds of real time.
void register_matmul(const std::string& family, TensorType type, int64_t n_rows, int64_t n_tok, int threads,
                     bool repack, double min_time) {
  const std::string name = family + "/" + std::string(tensor_type_name(static_cast<uint32_t>(type))) + "/" +
                           std::to_string(n_rows) + "x" + std::to_string(n_cols) + (repack ? "/repacked" : "") +
                           "/tokens:" + std::to_string(n_tok) + "/threads:" + std::to_string(threads);
  benchmark::RegisterBenchmark(name.c_str(), bm_matmul, type, n_rows, n_tok, threads, repack)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(min_time);
}

// A model's decode MLP as the step meets it: the gate and up matrices of every layer (Gemma 3
// 270M: 18 layers of 2048 x 640; Qwen 1.5B: 28 of 8960 x 1536), one call a layer, each pass after
// 256 MiB read elsewhere so that the weights come from memory as they do behind a step's output
// projection. Small matrices from memory are where the nibble formats fall behind Q8_0's bytes
// rate, and Qwen's calls behind one large matrix's (docs/notes/).
void bm_layer_calls_from_memory(benchmark::State& state, TensorType type, int64_t n_rows, int64_t cols, int layers,
                                int threads) {
  std::mt19937 rng(11);
  std::vector<std::vector<uint8_t>> bytes(static_cast<size_t>(2 * layers));
  std::vector<RepackedBuffer> packed(bytes.size());
  std::vector<WeightMatrix> w(bytes.size());
  double total = 0;
  for (size_t m = 0; m < bytes.size(); ++m) {
    bytes[m] = random_matrix(type, n_rows, cols, rng);
    w[m] = WeightMatrix{bytes[m].data(), type, n_rows, cols};
    if (can_repack(w[m])) {
      packed[m] = repack_whole(w[m]);
      w[m].repacked = packed[m].get();
    }
    total += double(bytes[m].size());
  }
  std::vector<float> x(static_cast<size_t>(cols)), gate(static_cast<size_t>(n_rows)), up(gate.size());
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> elsewhere(size_t{256} << 20, 1);
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  for (auto _ : state) {
    state.PauseTiming();
    uint64_t sum = 0;
    for (size_t i = 0; i < elsewhere.size(); i += 64) sum += elsewhere[i];
    benchmark::DoNotOptimize(sum);
    state.ResumeTiming();
    for (int l = 0; l < layers; ++l) {
      const MatmulOutput out[2] = {{&w[size_t(2 * l)], gate.data()}, {&w[size_t(2 * l + 1)], up.data()}};
      matmul_many(out, x.data(), 1, pool.get());
    }
    benchmark::DoNotOptimize(up.data());
  }
  state.counters["weights GB/s"] =
      benchmark::Counter(total * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

constexpr size_t kRows = 4096, kHeadDim = 64, kKiviGroup = 32;

std::vector<float> normal_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// Softmax-like weights of n_q queries over the rows (positive, summing to about 1).
std::vector<float> row_weights(size_t n_q) {
  std::vector<float> w = normal_floats(n_q * kRows, 11);
  for (float& v : w) v = std::exp(v) / float(kRows);
  return w;
}

// kRows rows of `type` (f16, q8_0, q4_0), stored from normal floats.
std::vector<std::byte> kv_rows_of(KVType type, uint32_t seed) {
  std::vector<std::byte> rows(kRows * kv_row_bytes(type, kHeadDim));
  store_rows(normal_floats(kRows * kHeadDim, seed).data(), rows.data(), type, kRows * kHeadDim, kHeadDim);
  return rows;
}

void bm_kv_row_dots(benchmark::State& state, KVType type, size_t n_q) {
  const std::vector<std::byte> rows = kv_rows_of(type, 3);
  const std::vector<float> q = normal_floats(n_q * kHeadDim, 5);
  std::vector<float> out(n_q * kRows);
  for (auto _ : state) {
    row_dots_group(q.data(), n_q, kHeadDim, rows.data(), type, kRows, kHeadDim, out.data(), kRows);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(rows.size()));
}

void bm_kv_weighted_sum(benchmark::State& state, KVType type, size_t n_q) {
  const std::vector<std::byte> rows = kv_rows_of(type, 4);
  const std::vector<float> w = row_weights(n_q);
  std::vector<float> out(n_q * kHeadDim);
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), 0.0f);
    rows_weighted_sum_group(w.data(), n_q, kRows, rows.data(), type, kRows, kHeadDim, out.data(), kHeadDim);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(rows.size()));
}

// Every KV head of the 1B model at depth 4096, rows read from memory as a decode step reads them:
// the key dots of a group of 4 queries, or the weighted value sum, head after head.
constexpr size_t kModelHeads = 16 * 8;

void bm_kv_from_memory(benchmark::State& state, KVType type, bool values) {
  std::vector<std::vector<std::byte>> heads;
  for (size_t h = 0; h < kModelHeads; ++h) heads.push_back(kv_rows_of(type, uint32_t(100 + h)));
  constexpr size_t kQueries = 4;
  const std::vector<float> q = normal_floats(kQueries * kHeadDim, 5);
  const std::vector<float> w = row_weights(kQueries);
  std::vector<float> dots(kQueries * kRows), out(kQueries * kHeadDim);
  for (auto _ : state) {
    for (const auto& rows : heads) {
      if (values) {
        rows_weighted_sum_group(w.data(), kQueries, kRows, rows.data(), type, kRows, kHeadDim, out.data(), kHeadDim);
      } else {
        row_dots_group(q.data(), kQueries, kHeadDim, rows.data(), type, kRows, kHeadDim, dots.data(), kRows);
      }
    }
    benchmark::DoNotOptimize(dots.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kModelHeads * heads[0].size()));
}

// A decode step's logits under positions inside the cache (every row shifted by 1..511): the
// fused kernel (turned in registers) against turning into an f32 scratch and dotting that.
void bm_kv_turned_probs(benchmark::State& state, KVType type, size_t n_q, bool fused) {
  constexpr size_t kShifts = 512;
  const std::vector<std::byte> rows = kv_rows_of(type, 3);
  const std::vector<float> q = normal_floats(n_q * kHeadDim, 5);
  std::vector<float> cos_sin(kHeadDim), turns(kShifts * 2 * kHeadDim), scratch(kRows * kHeadDim);
  for (size_t s = 0; s < kShifts; ++s) {
    rope_cache(int64_t(s), int64_t(kHeadDim), 10000.0f, cos_sin.data());
    rope_turn_row(cos_sin.data(), kHeadDim, false, turns.data() + s * 2 * kHeadDim);
  }
  std::vector<int32_t> shifts(kRows);
  std::mt19937 rng(7);
  for (auto& s : shifts) s = int32_t(1 + rng() % (kShifts - 1));
  const std::vector<uint8_t> mask(kRows, 1);
  std::vector<float> probs(n_q * kRows);
  for (auto _ : state) {
    if (fused) {
      query_probs_rotated(q.data(), n_q, kHeadDim, rows.data(), type, shifts.data(), kRows, kHeadDim, kHeadDim, false,
                          turns.data(), mask.data(), 0.125f, probs.data(), kRows);
    } else {
      rotate_rows_back(rows.data(), type, shifts.data(), kRows, kHeadDim, kHeadDim, false, turns.data(),
                       scratch.data());
      query_probs(q.data(), n_q, kHeadDim, scratch.data(), KVType::f32, kRows, kHeadDim, mask.data(), 0.125f,
                  probs.data(), kRows);
    }
    benchmark::DoNotOptimize(probs.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(rows.size()));
}

void bm_kivi_key_dots(benchmark::State& state, int bits, size_t n_q) {
  const size_t gb = kivi_key_group_bytes(bits, kKiviGroup, kHeadDim), n_groups = kRows / kKiviGroup;
  std::vector<uint8_t> groups(n_groups * gb);
  const std::vector<float> keys = normal_floats(kRows * kHeadDim, 3);
  for (size_t k = 0; k < n_groups; ++k) {
    kivi_quantize_key_group(keys.data() + k * kKiviGroup * kHeadDim, kHeadDim, nullptr, bits, kKiviGroup, kHeadDim,
                            groups.data() + k * gb);
  }
  const std::vector<float> q = normal_floats(n_q * kHeadDim, 5);
  std::vector<float> out(n_q * kRows);
  for (auto _ : state) {
    for (size_t k = 0; k < n_groups; ++k) {
      kivi_key_group_dots(q.data(), n_q, kHeadDim, groups.data() + k * gb, bits, kKiviGroup, kHeadDim,
                          out.data() + k * kKiviGroup, kRows);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(groups.size()));
}

void bm_kivi_value_sum(benchmark::State& state, int bits, size_t n_q) {
  const size_t rb = kivi_value_row_bytes(bits, kKiviGroup, kHeadDim);
  std::vector<uint8_t> rows(kRows * rb);
  const std::vector<float> values = normal_floats(kRows * kHeadDim, 4);
  for (size_t j = 0; j < kRows; ++j) {
    kivi_quantize_value_row(values.data() + j * kHeadDim, bits, kKiviGroup, kHeadDim, rows.data() + j * rb);
  }
  const std::vector<float> w = row_weights(n_q);
  std::vector<float> out(n_q * kHeadDim);
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), 0.0f);
    kivi_values_weighted_sum_group(w.data(), n_q, kRows, rows.data(), bits, kKiviGroup, kHeadDim, kRows, out.data(),
                                   kHeadDim);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(rows.size()));
}

#if defined(__x86_64__)
// 12 independent chains of 512-bit vpdpbusd (latency hidden), 64 multiply-adds each, in
// registers (named variables: an array would be kept in memory by the barrier below).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t vnni_loop(int64_t iterations) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
          a10 = a0, a11 = a0;
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = _mm512_dpbusd_epi32(a0, u, s);
    a1 = _mm512_dpbusd_epi32(a1, u, s);
    a2 = _mm512_dpbusd_epi32(a2, u, s);
    a3 = _mm512_dpbusd_epi32(a3, u, s);
    a4 = _mm512_dpbusd_epi32(a4, u, s);
    a5 = _mm512_dpbusd_epi32(a5, u, s);
    a6 = _mm512_dpbusd_epi32(a6, u, s);
    a7 = _mm512_dpbusd_epi32(a7, u, s);
    a8 = _mm512_dpbusd_epi32(a8, u, s);
    a9 = _mm512_dpbusd_epi32(a9, u, s);
    a10 = _mm512_dpbusd_epi32(a10, u, s);
    a11 = _mm512_dpbusd_epi32(a11, u, s);
    // The compiler may not merge or drop the chains.
    asm volatile(""
                 : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9),
                   "+v"(a10), "+v"(a11));
  }
  const __m512i total =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                        _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
                       _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, total);
  return lanes[0];
}

void bm_int8_peak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    state.SkipWithError("no AVX512-VNNI on this CPU");
    return;
  }
  constexpr int64_t kIterations = 1 << 16;
  for (auto _ : state) benchmark::DoNotOptimize(vnni_loop(kIterations));
  // Per thread; Google Benchmark sums rates over threads.
  state.counters["GOP/s"] = benchmark::Counter(2.0 * 64 * 12 * double(kIterations) * double(state.iterations()) / 1e9,
                                               benchmark::Counter::kIsRate);
}
#endif

// The weight types of the real models' matrices: the 1B shapes' (Q8_0, Q4_K, Q6_K) and the small
// models' nibble formats (SmolLM2's Q4_1, Gemma 3's Q5_0, Q4_0).
constexpr TensorType kDecodeWeightTypes[] = {TensorType::q8_0, TensorType::q4_k, TensorType::q6_k,
                                             TensorType::q4_0, TensorType::q4_1, TensorType::q5_0};

const bool registered = [] {
  const TensorType types[] = {TensorType::f32,  TensorType::f16,  TensorType::bf16, TensorType::q8_0,
                              TensorType::q4_0, TensorType::q4_k, TensorType::q6_k};
  for (const TensorType type : types) {
    for (const int64_t n_rows : {int64_t{2048}, int64_t{8192}}) {
      const std::string shape = std::string(tensor_type_name(static_cast<uint32_t>(type))) + "/" +
                                std::to_string(n_rows) + "x" + std::to_string(n_cols);
      benchmark::RegisterBenchmark(("matvec/" + shape + "/scalar").c_str(), bm_matvec, type, n_rows, 1, false)
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2);
      for (const int threads : {1, 2}) {
        benchmark::RegisterBenchmark(("matvec/" + shape + "/simd/threads:" + std::to_string(threads)).c_str(),
                                     bm_matvec, type, n_rows, threads, true)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime()
            ->MinTime(0.2);
      }
    }
  }
  for (const TensorType type : kDecodeWeightTypes) {
    for (const int64_t n_rows : {int64_t{2048}, int64_t{8192}}) {
      // 1 token: decode; 8 and 16: a server's batched decode step (streamed pieces); 128: a
      // prompt chunk. /repacked: the same weights repacked as the loader does on VNNI CPUs.
      for (const bool repack : {false, true}) {
        for (const int64_t n_tok : {int64_t{1}, int64_t{8}, int64_t{16}, int64_t{128}}) {
          for (const int threads : {1, 2}) register_matmul("matmul", type, n_rows, n_tok, threads, repack, 0.2);
        }
      }
    }
  }
  // One decode step's largest product, read from memory rather than cache: the 1B models' output
  // projection (vocabulary 128256 x 2048; Q6_K in Q4_K_M, Q4_K in Q4_K, Q8_0 in Q8_0), one token;
  // and the same shape in the nibble formats of the small real models' layers (SmolLM2's Q4_1,
  // Gemma 3's Q5_0), whose decode reads them from memory too.
  for (const TensorType type : kDecodeWeightTypes) {
    for (const bool repack : {false, true}) {
      for (const int threads : {1, 2}) register_matmul("matmul_from_memory", type, 128256, 1, threads, repack, 0.5);
    }
  }
  // Gemma 3 270M's shape in the small models' formats, and the 1.5B Qwen's (28 layers of 8960 x
  // 1536, Q4_K in Q4_K_M): whether a layer's call reads as fast as one large matrix does.
  struct LayerShape {
    TensorType type;
    int64_t rows, cols;
    int layers;
  };
  const LayerShape layer_shapes[] = {{TensorType::q8_0, 2048, 640, 18},
                                     {TensorType::q4_0, 2048, 640, 18},
                                     {TensorType::q4_1, 2048, 640, 18},
                                     {TensorType::q5_0, 2048, 640, 18},
                                     {TensorType::q4_k, 8960, 1536, 28}};
  for (const LayerShape& s : layer_shapes) {
    for (const int threads : {1, 2}) {
      const std::string name = "layer_calls_from_memory/" +
                               std::string(tensor_type_name(static_cast<uint32_t>(s.type))) + "/" +
                               std::to_string(s.layers) + "x2x" + std::to_string(s.rows) + "x" +
                               std::to_string(s.cols) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), bm_layer_calls_from_memory, s.type, s.rows, s.cols, s.layers, threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.5);
    }
  }
  // 6 queries: Qwen2.5's GQA group, more than a pass takes (two passes over the rows).
  for (const size_t n_q : {size_t{1}, size_t{4}, size_t{6}}) {
    const std::string shape =
        "/rows:" + std::to_string(kRows) + "/head_dim:" + std::to_string(kHeadDim) + "/queries:" + std::to_string(n_q);
    for (const KVType type : {KVType::f16, KVType::q8_0, KVType::q4_0}) {
      const std::string name = to_string(type) + shape;
      benchmark::RegisterBenchmark(("kv/row_dots_group/" + name).c_str(), bm_kv_row_dots, type, n_q)->MinTime(0.2);
      benchmark::RegisterBenchmark(("kv/rows_weighted_sum_group/" + name).c_str(), bm_kv_weighted_sum, type, n_q)
          ->MinTime(0.2);
      for (const bool fused : {false, true}) {
        benchmark::RegisterBenchmark(("kv/turned_probs/" + std::string(fused ? "fused/" : "scratch/") + name).c_str(),
                                     bm_kv_turned_probs, type, n_q, fused)
            ->MinTime(0.2);
      }
    }
    for (const int bits : {2, 4}) {
      const std::string b = std::to_string(bits) + "bit";
      benchmark::RegisterBenchmark(("kivi/key_dots/" + b + shape).c_str(), bm_kivi_key_dots, bits, n_q)->MinTime(0.2);
      benchmark::RegisterBenchmark(("kivi/value_sum/" + b + shape).c_str(), bm_kivi_value_sum, bits, n_q)->MinTime(0.2);
    }
  }
  for (const KVType type : {KVType::f16, KVType::q8_0, KVType::q4_0}) {
    const std::string shape = to_string(type) + "/heads:" + std::to_string(kModelHeads) +
                              "/rows:" + std::to_string(kRows) + "/head_dim:" + std::to_string(kHeadDim) + "/queries:4";
    benchmark::RegisterBenchmark(("kv_from_memory/row_dots_group/" + shape).c_str(), bm_kv_from_memory, type, false)
        ->MinTime(0.5);
    benchmark::RegisterBenchmark(("kv_from_memory/rows_weighted_sum_group/" + shape).c_str(), bm_kv_from_memory, type,
                                 true)
        ->MinTime(0.5);
  }
#if defined(__x86_64__)
  benchmark::RegisterBenchmark("int8_peak/vpdpbusd_zmm", bm_int8_peak)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime()
      ->MinTime(0.2);
#endif
  return true;
}();

}  // namespace
}  // namespace squeezekv
