// matvec throughput per weight type: SIMD with 1 and 2 threads next to the scalar twin, on the
// 2048x2048 and 8192x2048 (rows x cols) shapes of a small Llama's attention and FFN matrices.
// bytes_per_second counts weight bytes read, so it compares directly with memory bandwidth.
// matmul: the same shapes against 128 tokens (a prompt chunk), reported as int8 GOP/s (two per
// multiply-add), next to int8_peak: the machine's vpdpbusd throughput measured by a loop of
// independent instructions (AVX512-VNNI CPUs only), the ceiling of the prompt tiles.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/tensor_type.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

constexpr int64_t n_cols = 2048;

// Weights are built once per (type, rows) and shared by every benchmark of that shape.
const std::vector<uint8_t>& weights(TensorType type, int64_t n_rows) {
  static std::map<std::pair<TensorType, int64_t>, std::vector<uint8_t>> cache;
  auto [it, inserted] = cache.try_emplace({type, n_rows});
  if (inserted) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> row(n_cols);
    const size_t stride = row_bytes(type, n_cols);
    it->second.resize(stride * static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
      for (float& v : row) v = normal(rng);
      quantize_row(type, row.data(), it->second.data() + static_cast<size_t>(r) * stride, n_cols);
    }
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

void bm_matmul(benchmark::State& state, TensorType type, int64_t n_rows, int64_t n_tok, int threads) {
  const std::vector<uint8_t>& bytes = weights(type, n_rows);
  const WeightMatrix w{bytes.data(), type, n_rows, n_cols};
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
}

#if defined(__x86_64__)
// 12 independent chains of 512-bit vpdpbusd (latency hidden), 64 multiply-adds each, in
// registers (named variables: an array would be kept in memory by the barrier below).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t vnni_loop(int64_t iterations) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0, a10 = a0, a11 = a0;
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
    asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                 "+v"(a9), "+v"(a10), "+v"(a11));
  }
  const __m512i total = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
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
  for (const TensorType type : {TensorType::q8_0, TensorType::q4_k, TensorType::q6_k}) {
    for (const int64_t n_rows : {int64_t{2048}, int64_t{8192}}) {
      const std::string shape = std::string(tensor_type_name(static_cast<uint32_t>(type))) + "/" +
                                std::to_string(n_rows) + "x" + std::to_string(n_cols);
      for (const int threads : {1, 2}) {
        benchmark::RegisterBenchmark(("matmul/" + shape + "/tokens:128/threads:" + std::to_string(threads)).c_str(),
                                     bm_matmul, type, n_rows, int64_t{128}, threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.2);
      }
    }
  }
#if defined(__x86_64__)
  benchmark::RegisterBenchmark("int8_peak/vpdpbusd_zmm", bm_int8_peak)->Threads(1)->Threads(2)->UseRealTime()->MinTime(0.2);
#endif
  return true;
}();

}  // namespace
}  // namespace squeezekv
