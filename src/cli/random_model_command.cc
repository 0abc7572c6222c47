// `squeezekv random-model -o FILE`: writes a random-weight GGUF model of any Llama/Qwen2 shape and
// weight type (deterministic for a seed), so speed can be measured at real sizes without
// downloading weights: `--preset llama-1b --type q4_k_m` is the benchmarks' 1B model.
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/command_registry.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/engine/random_model.h"
#include "squeezekv/ops/tensor_type.h"

namespace squeezekv::cli {
namespace {

struct RandomModelArgs {
  std::string output;
  std::string preset = "tiny";
  std::string type = "f32";
  std::string arch = "llama";
  uint64_t seed = 1;
  // Shape flags: given ones override the preset.
  std::optional<int64_t> dim, layers, heads, kv_heads, head_dim, ffn, vocab, window;
  std::optional<uint32_t> context;
  bool tied = false;
  CLI::Option* tied_flag = nullptr;  // given: --tied / --untied overrides the preset
  CLI::Option* arch_option = nullptr;
};

// --type's values: every computable weight type by its lower-case name, and q4_k_m (Q4_K with Q6_K
// where llama.cpp's Q4_K_M puts it).
std::string lower_name(TensorType type) {
  std::string name(tensor_type_name(static_cast<uint32_t>(type)));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string type_choices() {
  std::string choices;
  for (const TensorType type : weight_types()) choices += lower_name(type) + ", ";
  return choices + "q4_k_m";
}

void run(const RandomModelArgs& a) {
  require(a.preset == "tiny" || a.preset == "llama-1b" || a.preset == "gemma3-270m", "--preset", a.preset,
          "must be tiny, llama-1b or gemma3-270m");
  const std::optional<TensorType> type = a.type == "q4_k_m" ? TensorType::q4_k : tensor_type_by_name(a.type);
  if (!type) require(false, "--type", a.type, "must be one of " + type_choices());
  RandomModelSpec spec = a.preset == "llama-1b"      ? llama_1b_spec(*type)
                         : a.preset == "gemma3-270m" ? gemma3_270m_spec(*type)
                                                     : RandomModelSpec{};
  spec.weight_type = *type;
  spec.k_quant_mix = a.type == "q4_k_m";
  if (a.arch_option->count() > 0 || a.preset != "gemma3-270m") spec.arch = a.arch;
  spec.seed = a.seed;
  spec.dim = a.dim.value_or(spec.dim);
  spec.n_layers = a.layers.value_or(spec.n_layers);
  spec.n_heads = a.heads.value_or(spec.n_heads);
  spec.n_kv_heads = a.kv_heads.value_or(spec.n_kv_heads);
  spec.head_dim = a.head_dim.value_or(spec.head_dim);
  spec.sliding_window = a.window.value_or(spec.sliding_window);
  spec.ffn_dim = a.ffn.value_or(spec.ffn_dim);
  spec.vocab = a.vocab.value_or(spec.vocab);
  spec.context_length = a.context.value_or(spec.context_length);
  if (a.tied_flag->count() > 0) spec.tied_embeddings = a.tied;
  write_random_model(a.output, spec);
  std::printf("wrote %s: %s, dim %lld, %lld layers, %lld/%lld heads, FFN %lld, vocab %lld, %s, %s embeddings\n",
              a.output.c_str(), spec.arch.c_str(), static_cast<long long>(spec.dim),
              static_cast<long long>(spec.n_layers), static_cast<long long>(spec.n_heads),
              static_cast<long long>(spec.n_kv_heads), static_cast<long long>(spec.ffn_dim),
              static_cast<long long>(spec.vocab), a.type.c_str(), spec.tied_embeddings ? "tied" : "separate");
}

void add_random_model_command(CLI::App& app) {
  auto a = std::make_shared<RandomModelArgs>();
  auto* cmd = app.add_subcommand("random-model", "write a random-weight GGUF model of any shape and weight type");
  cmd->add_option("-o,--output", a->output, "GGUF file to write")->required();
  cmd->add_option("--preset", a->preset,
                  "starting shape: tiny (dim 64, 2 layers), llama-1b (Llama-3.2-1B) or gemma3-270m (Gemma 3 270M, "
                  "arch gemma3)")
      ->capture_default_str();
  cmd->add_option("--type", a->type,
                  "weight type: " + type_choices() + " (Q4_K with Q6_K where llama.cpp's Q4_K_M puts it)")
      ->capture_default_str();
  a->arch_option = cmd->add_option("--arch", a->arch, "llama, qwen2 or gemma3")->capture_default_str();
  cmd->add_option("--seed", a->seed, "weights' seed")->capture_default_str();
  cmd->add_option("--dim", a->dim, "embedding width (overrides the preset)");
  cmd->add_option("--layers", a->layers, "layers");
  cmd->add_option("--heads", a->heads, "query heads");
  cmd->add_option("--kv-heads", a->kv_heads, "KV heads");
  cmd->add_option("--head-dim", a->head_dim, "head dimension (default dim / heads)");
  cmd->add_option("--sliding-window", a->window, "gemma3: the sliding layers' window (0: every layer global)");
  cmd->add_option("--ffn", a->ffn, "feed-forward width");
  cmd->add_option("--vocab", a->vocab, "vocabulary size (>= 259)");
  cmd->add_option("--context", a->context, "context length written to the metadata");
  a->tied_flag = cmd->add_flag("--tied,!--untied", a->tied, "tie the output matrix to the token embedding");
  cmd->footer("Example: squeezekv random-model --preset llama-1b --type q4_k_m -o build/llama1b-q4_k_m.gguf");
  cmd->callback([a] { run(*a); });
}

const CommandRegistration kRandomModelCommand{"random-model", 100, add_random_model_command};

}  // namespace
}  // namespace squeezekv::cli
