#include "squeezekv/engine/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "squeezekv/base/errors.h"
#include "engine/layer_config.h"
#include "squeezekv/base/quote.h"

namespace squeezekv {
namespace {

std::string shape_string(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// The tensor `name` with GGUF shape `ne` (ne0 first); FormatError naming it otherwise.
const GgufTensor& tensor(const GgufFile& file, const std::string& name, std::vector<int64_t> ne) {
  const GgufTensor* t = file.find_tensor(name);
  if (!t) throw FormatError("model '" + file.path() + "': missing tensor " + quoted_excerpt(name));
  const auto dims = t->dims();
  bool ok = dims.size() == ne.size() || (ne.size() == 2 && ne[1] == 1 && dims.size() == 1);
  for (size_t i = 0; ok && i < dims.size(); ++i) ok = dims[i] == ne[i];
  if (!ok) {
    throw FormatError("tensor " + quoted_excerpt(name) + " has shape " + shape_string(dims) + ", expected " +
                      shape_string(ne));
  }
  t->type();  // throws for a type squeezekv cannot compute on, naming tensor and type
  return *t;
}

WeightMatrix matrix(const GgufFile& file, const std::string& name, int64_t cols, int64_t rows) {
  const GgufTensor& t = tensor(file, name, {cols, rows});
  return WeightMatrix{t.data, t.type(), rows, cols};
}

std::vector<float> vector_f32(const GgufFile& file, const std::string& name, int64_t n) {
  const GgufTensor& t = tensor(file, name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.type(), t.data, out.data(), n);
  return out;
}

int positive(const GgufFile& file, const std::string& key, std::optional<uint32_t> value) {
  if (!value) throw FormatError("model '" + file.path() + "': missing key '" + key + "'");
  if (*value == 0 || *value > (1u << 24)) {
    throw FormatError("key '" + key + "' = " + std::to_string(*value) + ": out of range");
  }
  return int(*value);
}

// Writes the repacked layout of w into out (repacked_bytes(w)), about a MiB of rows at a time;
// the file's pages of each range repacked so far are released at once, so that the load never
// holds both copies of more than a piece.
void repack_releasing_pages(const GgufFile& file, const WeightMatrix& w, uint8_t* out) {
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t groups = (w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows;
  const int64_t piece = std::max<int64_t>(1, int64_t(1 << 20) / int64_t(stride * kRepackedGroupRows));
  for (int64_t g = 0; g < groups; g += piece) {
    const int64_t g1 = std::min(groups, g + piece);
    repack_groups(w, g, g1, out);
    const int64_t rows_done = std::min(w.n_rows, g1 * kRepackedGroupRows);
    file.release_pages(w.data, static_cast<size_t>(rows_done) * stride);
  }
}

}  // namespace

// Every matrix that can be repacked goes into one buffer, in the order a step reads them, so that
// the whole model streams from huge pages (most of SmolLM2's matrices are smaller than one).
void Model::repack_weights() {
  std::vector<WeightMatrix*> matrices;
  auto add = [&](WeightMatrix& w) {
    if (can_repack(w)) matrices.push_back(&w);
  };
  add(token_embd_);
  if (!config_.tied_embeddings) add(output_);
  for (LayerWeights& l : layers_) {
    for (WeightMatrix* w : l.matrices()) add(*w);
  }
  size_t total = 0;
  for (const WeightMatrix* w : matrices) {
    const size_t bytes = squeezekv::repacked_bytes(*w);  // a multiple of 64
    require(bytes <= std::numeric_limits<size_t>::max() - total, "repacked bytes", bytes, "overflow the model's total");
    total += bytes;
  }
  if (total == 0) return;
  repacked_ = allocate_repacked_bytes(total);
  repacked_matrices_ = matrices.size();
  repacked_bytes_ = total;
  size_t offset = 0;
  for (WeightMatrix* w : matrices) {
    repack_releasing_pages(file_, *w, repacked_.get() + offset);
    w->repacked = repacked_.get() + offset;
    offset += squeezekv::repacked_bytes(*w);
  }
  if (config_.tied_embeddings) output_.repacked = token_embd_.repacked;
}

Model Model::load(const std::string& path, const LoadOptions& options) {
  GgufFile file = GgufFile::open(path);
  Tokenizer tokenizer(file);
  Model model(std::move(file), std::move(tokenizer));
  const GgufFile& f = model.file_;
  ModelConfig& c = model.config_;
  c.arch = std::string(f.get_string("general.architecture"));
  const ArchitectureInfo* arch = find_architecture(c.arch);
  if (arch == nullptr) {
    throw FormatError("general.architecture = " + quoted_excerpt(c.arch) +
                      ": unsupported architecture (squeezekv runs " + architecture_names() + ")");
  }
  c.info = arch;
  check_architecture_keys(f, *arch);
  if (auto name = f.find_string("general.name")) c.name = std::string(*name);
  const std::string a = c.arch + ".";
  c.dim = positive(f, a + "embedding_length", f.find_u32(a + "embedding_length"));
  c.n_layers = positive(f, a + "block_count", f.find_u32(a + "block_count"));
  c.n_heads = positive(f, a + "attention.head_count", f.find_u32(a + "attention.head_count"));
  c.n_kv_heads = f.has(a + "attention.head_count_kv")
                     ? positive(f, a + "attention.head_count_kv", f.find_u32(a + "attention.head_count_kv"))
                     : c.n_heads;
  c.ffn_dim = positive(f, a + "feed_forward_length", f.find_u32(a + "feed_forward_length"));
  c.context_length =
      f.has(a + "context_length") ? positive(f, a + "context_length", f.find_u32(a + "context_length")) : 2048;
  if (c.n_heads % c.n_kv_heads != 0) {
    throw FormatError(a + "attention.head_count_kv = " + std::to_string(c.n_kv_heads) +
                      ": must divide head_count = " + std::to_string(c.n_heads));
  }
  c.head_dim = f.has(a + "attention.key_length")
                   ? positive(f, a + "attention.key_length", f.find_u32(a + "attention.key_length"))
                   : c.dim / c.n_heads;
  if (!f.has(a + "attention.key_length") && c.dim % c.n_heads != 0) {
    throw FormatError(a + "embedding_length = " + std::to_string(c.dim) +
                      ": not a multiple of head_count = " + std::to_string(c.n_heads));
  }
  if (int64_t(c.n_heads) * c.head_dim > (int64_t(1) << 24)) {
    throw FormatError(a + "attention.head_count x key_length = " + std::to_string(int64_t(c.n_heads) * c.head_dim) +
                      ": out of range");
  }
  c.n_rot = f.has(a + "rope.dimension_count")
                ? positive(f, a + "rope.dimension_count", f.find_u32(a + "rope.dimension_count"))
                : c.head_dim;
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    throw FormatError(a + "rope.dimension_count = " + std::to_string(c.n_rot) +
                      ": must be even and at most the head dimension " + std::to_string(c.head_dim));
  }
  c.rope_base = hyper_parameter(f, a + "rope.freq_base", 10000.0f, kMinRopeBase, kMaxRopeBase);
  c.norm_eps = hyper_parameter(f, a + "attention.layer_norm_rms_epsilon", 1e-5f, kMinNormEps, kMaxNormEps);
  c.rope_style = arch->rope_style;
  c.qkv_bias = arch->qkv_bias;
  c.embed_scale = arch->embed_scaled ? std::sqrt(float(c.dim)) : 0.0f;
  c.layers = read_layer_configs(f, *arch, c);

  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd) throw FormatError("model '" + path + "': missing tensor 'token_embd.weight'");
  c.vocab = int(embd->ne[1]);
  if (c.vocab != model.tokenizer_.vocab_size()) {
    throw FormatError("tensor 'token_embd.weight' has " + std::to_string(c.vocab) + " rows but the vocabulary has " +
                      std::to_string(model.tokenizer_.vocab_size()) + " tokens");
  }
  model.token_embd_ = matrix(f, "token_embd.weight", c.dim, c.vocab);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  model.output_ = c.tied_embeddings ? model.token_embd_ : matrix(f, "output.weight", c.dim, c.vocab);
  model.output_norm_ = vector_f32(f, "output_norm.weight", c.dim);

  auto extent = [&c](Extent e) -> int64_t {
    switch (e) {
      case Extent::one:
        return 1;
      case Extent::dim:
        return c.dim;
      case Extent::head_dim:
        return c.head_dim;
      case Extent::q_dim:
        return c.q_dim();
      case Extent::kv_dim:
        return c.kv_dim();
      case Extent::ffn_dim:
        return c.ffn_dim;
    }
    return 0;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    for (const BlockTensor& t : block_tensors()) {
      if (!arch->has(t.part)) continue;
      const std::string name = b + std::string(t.name);
      if (t.matrix != nullptr) {
        w.*t.matrix = matrix(f, name, extent(t.cols), extent(t.rows));
      } else {
        w.*t.vector = vector_f32(f, name, extent(t.cols));
      }
    }
    model.layers_.push_back(std::move(w));
  }
  // Every block tensor must belong to a block the header declares: a block_count smaller than
  // the blocks stored would otherwise run a truncated model without a word.
  for (const GgufTensor& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    const size_t dot = t.name.find('.', 4);
    const std::string index(t.name.substr(4, dot == std::string_view::npos ? std::string_view::npos : dot - 4));
    const bool numeric =
        !index.empty() && index.size() <= 9 && index.find_first_not_of("0123456789") == std::string::npos;
    if (!numeric || std::stoi(index) >= c.n_layers) {
      throw FormatError("model '" + path + "': tensor " + quoted_excerpt(t.name) + " lies outside the " +
                        std::to_string(c.n_layers) + " blocks of " + a +
                        "block_count: the tensors must match the header");
    }
  }
  if (options.repack) model.repack_weights();
  return model;
}

void Model::embed(int32_t token, float* out) const {
  if (token < 0 || token >= config_.vocab) {  // the message only on failure: embed runs per token
    require(false, "token", token, "out of range [0, " + std::to_string(config_.vocab) + ")");
  }
  dequantize_weight_row(token_embd_, token, out);
}

uint64_t Model::n_params() const {
  uint64_t n = 0;
  for (const GgufTensor& t : file_.tensors()) n += uint64_t(t.n_elements());
  return n;
}

uint64_t Model::weight_bytes() const {
  uint64_t n = 0;
  for (const GgufTensor& t : file_.tensors()) n += t.n_bytes;
  return n;
}

std::vector<LayerKind> ModelConfig::layer_kinds() const {
  std::vector<LayerKind> kinds;
  for (const LayerConfig& lc : layers) kinds.push_back(lc.kind());
  const bool any_sliding = std::any_of(kinds.begin(), kinds.end(), [](const LayerKind& k) { return k.is_sliding(); });
  return any_sliding ? kinds : std::vector<LayerKind>{};
}

}  // namespace squeezekv
