// The real models that scripts/fetch_models.sh puts in ${SQUEEZEKV_MODELS:-$HOME/.cache/squeezekv/models}
// (scripts/setup.sh runs it), each loaded once per test program. A missing file fails the test that
// asks for it, naming the path and the command that fetches it; it never skips.
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "squeezekv/engine/gguf_reader.h"
#include "squeezekv/engine/gguf_writer.h"
#include "squeezekv/engine/model.h"

namespace squeezekv::test {

inline constexpr const char* kSmolLM2File = "SmolLM2-135M-Instruct.Q4_1.gguf";
// Gemma 3 270M (architecture gemma3; its Q5_0 tensors are also read through GgufFile by the ops tests).
inline constexpr const char* kGemma3File = "gemma-3-270m-q4_k_m.gguf";

inline std::string real_model_path(const std::string& file) {
  const char* dir = std::getenv("SQUEEZEKV_MODELS");
  const char* home = std::getenv("HOME");
  const std::string base = dir != nullptr && *dir != '\0'
                               ? std::string(dir)
                               : std::string(home != nullptr ? home : "") + "/.cache/squeezekv/models";
  const std::string path = base + "/" + file;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("missing real model " + path + ": run scripts/fetch_models.sh");
  }
  return path;
}

inline const Model& smollm2() {
  static const Model model = Model::load(real_model_path(kSmolLM2File));
  return model;
}

// Writes `in` to `path` with every tensor dequantised to F32 and every key as it is: the file's own
// weights, so that the engine can be compared with llama.cpp's run of the same F32 weights without
// the activations' 8-bit rounding in between. Rows are converted while the file is written.
inline void write_f32_copy(const GgufFile& in, const std::string& path) {
  GgufWriter out;
  for (std::string_view key : in.keys()) {
    const GgufValue& v = in.get(key);
    switch (v.type()) {
      case GgufType::string:
        out.add_string(key, v.as_string());
        break;
      case GgufType::u32:
        out.add_u32(key, v.as_u32());
        break;
      case GgufType::i32:
        out.add_i32(key, v.as_i32());
        break;
      case GgufType::f32:
        out.add_f32(key, v.as_f32());
        break;
      case GgufType::boolean:
        out.add_bool(key, v.as_bool());
        break;
      case GgufType::array:
        if (v.array_type() == GgufType::string) {
          const auto views = v.strings();
          out.add_array(key, std::vector<std::string>(views.begin(), views.end()));
        } else if (v.array_type() == GgufType::f32) {
          out.add_array(key, v.to_f32s());
        } else {
          out.add_array(key, v.to_i32s());
        }
        break;
      default:
        throw std::runtime_error("write_f32_copy: key " + std::string(key) + " has a type it does not copy");
    }
  }
  for (const GgufTensor& t : in.tensors()) {
    const std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    const TensorType type = t.type();
    const size_t stride = row_bytes(type, t.ne[0]);
    out.add_tensor(t.name, ne, TensorType::f32, [&t, type, stride](int64_t first, int64_t n, std::span<uint8_t> bytes) {
      std::vector<float> row(static_cast<size_t>(t.ne[0]));
      for (int64_t r = 0; r < n; ++r) {
        dequantize_row(type, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(first + r) * stride, row.data(),
                       t.ne[0]);
        std::memcpy(bytes.data() + static_cast<size_t>(r) * row.size() * sizeof(float), row.data(),
                    row.size() * sizeof(float));
      }
    });
  }
  out.write(path);
}

}  // namespace squeezekv::test
