// Helpers shared by the tests: deterministic random data and a mock model's keys.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace squeezekv::test {

// Standard normal samples from a fixed generator (Box-Muller, so identical on every platform).
inline std::vector<float> normal(size_t n, uint64_t seed, float scale = 1.0f) {
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

}  // namespace squeezekv::test
