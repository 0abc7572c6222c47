// Each layer's LayerConfig from a file's keys and its architecture's row (model.cc's loader).
#pragma once

#include <vector>

#include "squeezekv/engine/gguf.h"
#include "squeezekv/engine/model.h"

namespace squeezekv {

// FormatError naming the key for a "<arch>.*" key the architecture does not list, or one whose
// value squeezekv cannot honour (rope scaling, logit soft-capping, a value length unlike the key
// length).
void check_architecture_keys(const GgufFile& file, const ArchitectureInfo& arch);

// The layers of `c` (its shape and rope_base already read): attention kind and window, rope base,
// norms, activation and attention scale.
std::vector<LayerConfig> read_layer_configs(const GgufFile& file, const ArchitectureInfo& arch, const ModelConfig& c);

}  // namespace squeezekv
