// ModelIdentity (engine/cache_file.h): what a saved cache must match in the model that loads it.
#include <algorithm>
#include <string>

#include "squeezekv/base/fnv1a.h"
#include "squeezekv/engine/cache_file.h"

namespace squeezekv {
namespace {

bool tokenizer_key(std::string_view key) { return key.starts_with("tokenizer."); }

uint64_t tokenizer_hash(const Model& model) {
  const Tokenizer& t = model.tokenizer();
  uint64_t h = fnv1a("tokenizer");
  const int32_t vocab = t.vocab_size();
  h = fnv1a(&vocab, sizeof vocab, h);
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string_view text = t.token_text(id);
    const auto n = uint32_t(text.size());
    h = fnv1a(&n, sizeof n, h);
    h = fnv1a(text, h);
  }
  for (const std::optional<int32_t> special : {t.bos(), t.eos(), t.unk()}) {
    const int32_t id = special.value_or(-1);
    h = fnv1a(&id, sizeof id, h);
  }
  return h;
}

// Every tensor's name, type, shape and first bytes (a fine-tune with the same metadata differs
// there; a page or so a tensor, read once per save or load), and every metadata key but the
// tokenizer's (hashed apart) with its value as text: another quantisation's file differs here.
uint64_t weights_hash(const Model& model) {
  const GgufFile& file = model.file();
  uint64_t h = fnv1a("weights");
  for (const GgufTensor& t : file.tensors()) {
    h = fnv1a(t.name, h);
    h = fnv1a(&t.type_id, sizeof t.type_id, h);
    h = fnv1a(t.ne.data(), sizeof t.ne, h);
    if (t.data != nullptr) h = fnv1a(t.data, size_t(std::min<uint64_t>(t.n_bytes, 256)), h);
  }
  for (const std::string_view key : file.keys()) {
    if (tokenizer_key(key)) continue;
    h = fnv1a(key, h);
    h = fnv1a(file.get(key).to_string(), h);
  }
  return h;
}

}  // namespace

ModelIdentity model_identity(const Model& model) {
  const ModelConfig& c = model.config();
  ModelIdentity id;
  id.arch = c.arch;
  id.name = c.name;
  id.n_layers = c.n_layers;
  id.n_heads = c.n_heads;
  id.n_kv_heads = c.n_kv_heads;
  id.head_dim = c.head_dim;
  id.vocab = c.vocab;
  const std::vector<LayerKind> kinds = c.layer_kinds();
  id.layer_windows.assign(size_t(c.n_layers), 0);
  for (size_t i = 0; i < kinds.size() && i < id.layer_windows.size(); ++i) id.layer_windows[i] = kinds[i].window;
  id.tokenizer_hash = tokenizer_hash(model);
  id.weights_hash = weights_hash(model);
  return id;
}

std::string identity_mismatch(const ModelIdentity& file, const ModelIdentity& running) {
  auto differ = [](const std::string& field, const auto& a, const auto& b) {
    return field + ": the file's " + a + ", this model's " + b;
  };
  auto num = [](auto v) { return std::to_string(v); };
  if (file.arch != running.arch) return differ("architecture", file.arch, running.arch);
  if (file.n_layers != running.n_layers) return differ("layers", num(file.n_layers), num(running.n_layers));
  if (file.n_heads != running.n_heads) return differ("attention heads", num(file.n_heads), num(running.n_heads));
  if (file.n_kv_heads != running.n_kv_heads) return differ("KV heads", num(file.n_kv_heads), num(running.n_kv_heads));
  if (file.head_dim != running.head_dim) return differ("head_dim", num(file.head_dim), num(running.head_dim));
  if (file.vocab != running.vocab) return differ("vocabulary", num(file.vocab), num(running.vocab));
  if (file.layer_windows != running.layer_windows) return "sliding windows differ";
  if (file.tokenizer_hash != running.tokenizer_hash) return "tokenizer differs (its vocabulary hash)";
  if (file.weights_hash != running.weights_hash) {
    return "weights differ (another model or quantisation: the hash of the tensors' names, types and shapes "
           "and the metadata; the file's model is '" +
           file.name + "')";
  }
  return {};
}

}  // namespace squeezekv
