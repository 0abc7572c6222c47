// Helpers shared by the tests: the shared model and text, deterministic random data.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "squeezekv/eval/synth.h"

namespace squeezekv::test {

// A folder of this process's own under the system's temporary folder: two test runs at once (two
// build folders on one machine) never overwrite each other's files.
inline std::filesystem::path temp_dir() {
  static const std::filesystem::path dir = [] {
    auto path = std::filesystem::temp_directory_path() / ("squeezekv-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir;
}

// The real model and text beside the repository (tests run from its root); missing is a failure.
inline constexpr const char* kStoriesModel = "../shared/models/stories260K.gguf";
inline constexpr const char* kTinyStoriesText = "../shared/data/tinystories_val.txt";

// Standard normal samples from a fixed generator (the library's, so identical on every platform).
inline std::vector<float> normal(size_t n, uint64_t seed, float scale = 1.0f) {
  return gaussian_samples(n, seed, scale);
}

}  // namespace squeezekv::test
