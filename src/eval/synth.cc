#include "squeezekv/eval/synth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "squeezekv/alloc/concentration.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

struct GridPoint {
  int layers, seq_len, budget;
  double strength;
};

SynthResult run_point(const SynthOptions& options, const GridPoint& point, const std::vector<float>& pool) {
  KVCacheConfig config = options.base;
  config.budget = point.budget;
  config.set("strength", point.strength);
  const int dim = config.head_dim, heads = options.kv_heads, L = point.layers;
  auto model = KVCacheBuilder::for_model(L, config, heads);

  // Layer l's keys: (1 - frac) * N(0, 1) + 3 * frac, from a per-layer window of the pool.
  const size_t prompt = size_t(heads) * size_t(point.seq_len) * size_t(dim);
  const size_t step = size_t(heads) * size_t(dim);
  const size_t per_layer = prompt + step * size_t(options.decode_tokens);
  std::vector<float> keys(per_layer), values(per_layer);
  double seconds = 0.0;
  std::vector<double> concentrations;
  std::vector<int> schedule, held_budgets;
  int64_t scheduled_rows = 0, held_rows = 0, wasted_rows = 0;
  auto make = [&](int layer) {
    // Each layer reads its own window of the shared pool (a prime stride keeps windows apart).
    const size_t offset = (size_t(layer) * 7919u * step) % (pool.size() - 2 * per_layer + 1);
    for (size_t i = 0; i < per_layer; ++i) {
      keys[i] = mock_key(pool[offset + i], layer, L);
      values[i] = pool[offset + per_layer + i];
    }
  };
  // Keys are laid out [heads, seq, dim] for the prompt, then [heads, 1, dim] per decode token.
  std::vector<std::vector<float>> decode_keys(static_cast<size_t>(L)), decode_values(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    make(l);
    decode_keys[size_t(l)].assign(keys.begin() + long(prompt), keys.end());
    decode_values[size_t(l)].assign(values.begin() + long(prompt), values.end());
    // The harness reports its keys' concentration for every method (the squeeze allocator
    // measures the same on its own).
    concentrations.push_back(concentration_score(keys.data(), heads, point.seq_len, dim));
    const auto start = std::chrono::steady_clock::now();
    model->layer(l).update(keys.data(), values.data(), point.seq_len);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  schedule = model->scheduled_budgets();
  held_budgets = model->budgets();
  for (int l = 0; l < L; ++l) {
    scheduled_rows += schedule[size_t(l)];
    held_rows += model->layer(l).rows_per_head();
  }
  // The promise: the schedule's total, or every row when the layers together cannot hold it.
  wasted_rows = std::min<int64_t>(scheduled_rows, int64_t(L) * point.seq_len) - held_rows;
  for (int t = 0; t < options.decode_tokens; ++t) {
    for (int l = 0; l < L; ++l) {
      const float* k = decode_keys[size_t(l)].data() + size_t(t) * step;
      const float* v = decode_values[size_t(l)].data() + size_t(t) * step;
      const auto start = std::chrono::steady_clock::now();
      model->layer(l).update(k, v, 1);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  SynthResult r;
  r.method = config.method;
  r.n_layers = L;
  r.seq_len = point.seq_len;
  r.budget = point.budget;
  r.strength = point.strength;
  r.concentrations = std::move(concentrations);
  r.schedule = std::move(schedule);
  r.held_budgets = std::move(held_budgets);
  r.scheduled_rows = scheduled_rows;
  r.held_rows = held_rows;
  r.wasted_rows = wasted_rows;
  for (int l = 0; l < L; ++l) r.kept.push_back(model->layer(l).rows_per_head());
  r.kept_bytes = model->kept_bytes();
  r.full_bytes = model->full_bytes();
  r.compression_ratio = model->compression_ratio();
  r.seconds = seconds;
  return r;
}

}  // namespace

std::vector<float> gaussian_samples(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
    out[i] = float(r * std::cos(a)) * scale;
    if (i + 1 < n) out[i + 1] = float(r * std::sin(a)) * scale;
  }
  return out;
}

std::vector<SynthResult> run_synth(const SynthOptions& options, const std::function<void(int, int)>& progress) {
  // Every count is bounded before any arithmetic or allocation uses it.
  const auto in = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
  const auto range = [](int lo, int hi) {
    return "must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  };
  require(in(options.kv_heads, 1, kMaxCacheHeads), "kv_heads", options.kv_heads, range(1, kMaxCacheHeads));
  require(in(options.decode_tokens, 0, kMaxSynthTokens), "decode_tokens", options.decode_tokens,
          range(0, kMaxSynthTokens));
  require(in(options.threads, 1, kMaxSynthThreads), "threads", options.threads, range(1, kMaxSynthThreads));
  for (int l : options.layers) require(in(l, 1, kMaxCacheLayers), "layers", l, range(1, kMaxCacheLayers));
  for (int s : options.seq_lens) require(in(s, 1, kMaxSynthTokens), "seq_len", s, range(1, kMaxSynthTokens));
  for (int s : options.seq_lens) {
    // One layer's prompt and decode keys are held as f32 at once.
    const int64_t floats = int64_t(options.kv_heads) * options.base.head_dim * (int64_t(s) + options.decode_tokens);
    require(floats <= kMaxSynthLayerFloats, "seq_len", s,
            "kv_heads * head_dim * (seq_len + decode) = " + std::to_string(floats) + " exceeds " +
                std::to_string(kMaxSynthLayerFloats) + " floats per layer");
  }
  // The strengths are swept where the allocator reads one (squeeze's), else the base's one value.
  const bool sweeps_strength = reads_param(options.base, "strength");
  const std::vector<double> strengths =
      sweeps_strength ? options.strengths : std::vector<double>{options.base.get_real("strength")};
  std::vector<GridPoint> grid;
  for (int l : options.layers) {
    for (int s : options.seq_lens) {
      for (int b : options.budgets) {
        for (double st : strengths) {
          KVCacheConfig check = options.base;
          check.budget = b;
          check.set("strength", st);
          check.validate();  // fail before running anything
          grid.push_back({l, s, b, st});
        }
      }
    }
  }
  int max_seq = 1;
  for (int s : options.seq_lens) max_seq = std::max(max_seq, s);
  const size_t per_layer =
      size_t(options.kv_heads) * size_t(options.base.head_dim) * size_t(max_seq + options.decode_tokens);
  const std::vector<float> pool = gaussian_samples(4 * per_layer, options.seed);

  std::vector<SynthResult> results(grid.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mutex;
  std::exception_ptr failure;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < grid.size();) {
      try {
        results[i] = run_point(options, grid[i], pool);
      } catch (...) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        if (!failure) failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(progress_mutex);
      const int finished = ++done;
      if (progress) progress(finished, int(grid.size()));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < options.threads; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace squeezekv
