// `squeezekv info -m M`: metadata, tensors, parameter count and memory needed.
#include <cstdio>
#include <memory>
#include <string>
#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "cli/model_options.h"

namespace squeezekv::cli {
namespace {

struct InfoArgs {
  ModelOptions model;
  bool json = false;
  bool tensors = false;
};

std::string dims(const GgufTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[size_t(i)]);
  return s + "]";
}

// The layers grouped by attention kind: "15 sliding (window 512, rope base 10000), 3 global".
void print_layers(const ModelConfig& c) {
  std::string kinds;
  for (AttentionKind kind : {AttentionKind::sliding, AttentionKind::global}) {
    int count = 0;
    const LayerConfig* first = nullptr;
    for (const LayerConfig& lc : c.layers) {
      if (lc.attention != kind) continue;
      count += 1;
      if (first == nullptr) first = &lc;
    }
    if (count == 0) continue;
    char buf[160];
    if (kind == AttentionKind::sliding) {
      std::snprintf(buf, sizeof buf, "%d sliding (window %d, rope base %g)", count, first->window, first->rope_base);
    } else {
      std::snprintf(buf, sizeof buf, "%d global (rope base %g)", count, first->rope_base);
    }
    kinds += (kinds.empty() ? "" : ", ") + std::string(buf);
  }
  const LayerConfig& l0 = c.layers.front();
  std::printf("layers       %s; gate %s%s%s, attention scale %g%s\n", kinds.c_str(), activation_name(l0.activation),
              l0.qk_norm ? ", Q/K norms" : "", l0.post_norms ? ", post-norms" : "", l0.attention_scale,
              c.embed_scale != 0.0f ? ", embeddings scaled by sqrt(dim)" : "");
}

void run(const InfoArgs& a) {
  const Model model = Model::load(a.model.model_path, {.repack = false});  // it computes nothing
  const ModelConfig& c = model.config();
  const GgufFile& f = model.file();
  // A full f16 cache at the model's context length, for the memory estimate.
  const double kv_full = 2.0 * c.n_layers * c.n_kv_heads * double(c.head_dim) * c.context_length * 2;
  if (a.json) {
    nlohmann::json out = {{"path", f.path()},
                          {"gguf_version", f.version()},
                          {"architecture", c.arch},
                          {"name", c.name},
                          {"n_params", model.n_params()},
                          {"weight_bytes", model.weight_bytes()},
                          {"dim", c.dim},
                          {"n_layers", c.n_layers},
                          {"n_heads", c.n_heads},
                          {"n_kv_heads", c.n_kv_heads},
                          {"head_dim", c.head_dim},
                          {"ffn_dim", c.ffn_dim},
                          {"vocab", c.vocab},
                          {"context_length", c.context_length},
                          {"n_rot", c.n_rot},
                          {"rope_base", c.rope_base},
                          {"norm_eps", c.norm_eps},
                          {"tied_embeddings", c.tied_embeddings},
                          {"kv_bytes_full_context_f16", kv_full}};
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerConfig& lc : c.layers) {
      layers.push_back({{"attention", to_string(lc.attention)},
                        {"window", lc.window},
                        {"rope_base", lc.rope_base},
                        {"qk_norm", lc.qk_norm},
                        {"post_norms", lc.post_norms},
                        {"activation", activation_name(lc.activation)},
                        {"attention_scale", lc.attention_scale}});
    }
    out["layers"] = layers;
    out["embed_scale"] = c.embed_scale;
    nlohmann::json meta = nlohmann::json::object();
    for (std::string_view key : f.keys()) meta[std::string(key)] = f.get(key).to_string(8);
    out["metadata"] = meta;
    nlohmann::json tensors = nlohmann::json::array();
    for (const GgufTensor& t : f.tensors()) {
      tensors.push_back({{"name", t.name},
                         {"type", t.type_name()},
                         {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                         {"bytes", t.n_bytes}});
    }
    out["tensors"] = tensors;
    // A model's strings may hold invalid UTF-8: replaced (U+FFFD), never an error.
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("model        %s (GGUF v%u, %zu keys, %zu tensors)\n", f.path().c_str(), f.version(), f.keys().size(),
              f.tensors().size());
  std::printf("architecture %s%s%s\n", c.arch.c_str(), c.name.empty() ? "" : ", name ", c.name.c_str());
  std::printf("parameters   %.3f M (%.2f MiB of weights)\n", double(model.n_params()) / 1e6,
              double(model.weight_bytes()) / 1048576.0);
  std::printf("shape        dim %d, %d layers, %d heads, %d KV heads, head_dim %d, FFN %d, vocab %d\n", c.dim,
              c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.vocab);
  std::printf("rope         %d dims, base %g, %s; RMS norm eps %g; %s embeddings\n", c.n_rot, c.rope_base,
              c.rope_style == RopeStyle::neox ? "neox" : "normal", c.norm_eps,
              c.tied_embeddings ? "tied" : "separate output");
  print_layers(c);
  std::printf("context      %d tokens; a full f16 KV cache at that length: %.2f MiB\n", c.context_length,
              kv_full / 1048576.0);
  std::printf("memory       about %.2f MiB (weights, mapped) + KV cache\n", double(model.weight_bytes()) / 1048576.0);
  std::printf("\nmetadata:\n");
  for (std::string_view key : f.keys()) {
    std::printf("  %-44s %s\n", std::string(key).c_str(), f.get(key).to_string(6).c_str());
  }
  if (a.tensors) {
    std::printf("\ntensors:\n");
    for (const GgufTensor& t : f.tensors()) {
      std::printf("  %-32s %-6s %s\n", std::string(t.name).c_str(), std::string(t.type_name()).c_str(),
                  dims(t).c_str());
    }
  }
}

void add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  auto* cmd = app.add_subcommand("info", "show a GGUF model's metadata, shape, tensors and memory needs");
  cmd->add_option("-m,--model", args->model.model_path, "GGUF model file")->required();
  cmd->add_flag("--tensors", args->tensors, "also list every tensor");
  cmd->add_flag("--json", args->json, "print JSON (always includes the tensors)");
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kInfoCommand{"info", 40, add_info_command};

}  // namespace
}  // namespace squeezekv::cli
