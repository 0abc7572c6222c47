// Each layer's LayerConfig from a file's keys and its architecture's row (model.cc's loader).
#pragma once

#include <string>
#include <vector>

#include "squeezekv/engine/gguf_reader.h"
#include "squeezekv/engine/model.h"

namespace squeezekv {

// FormatError naming the key for a "<arch>.*" key the architecture does not list, or one whose
// value squeezekv cannot honour (rope scaling, logit soft-capping, a value length unlike the key
// length).
void check_architecture_keys(const GgufFile& file, const ArchitectureInfo& arch);

// The float hyper-parameter `key` (or `fallback` when the file has none), refused with a
// FormatError naming the key unless it is finite and in [lo, hi]: a NaN, an infinity or an absurd
// value would otherwise load and produce garbage (or a NaN caught far away).
// The ranges the loader accepts: RoPE bases of real models lie between 1e4 and 1e7, epsilons
// between 1e-12 and 1e-5.
inline constexpr float kMinRopeBase = 1.0f, kMaxRopeBase = 1e12f;
inline constexpr float kMinNormEps = 1e-12f, kMaxNormEps = 0.1f;
float hyper_parameter(const GgufFile& file, const std::string& key, float fallback, float lo, float hi);

// The layers of `c` (its shape and rope_base already read): attention kind and window, rope base,
// norms, activation and attention scale.
std::vector<LayerConfig> read_layer_configs(const GgufFile& file, const ArchitectureInfo& arch, const ModelConfig& c);

}  // namespace squeezekv
