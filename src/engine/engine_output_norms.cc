// KVzip+'s weighting of a reconstruction's attention (ReconstructionSpan::by_output): a row's
// weight for query head h times ||W_O,h v||, the norm of what its value adds through the attention
// output, over the norm of the querying token's hidden state. The Gram matrices of W_O's heads are
// built once per layer; the chunk's norms once per layer and chunk, read by every update of its pass.
#include <algorithm>
#include <cmath>

#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/reconstruction.h"

namespace squeezekv {

void Engine::prepare_output_weighting(int l, const LayerCache& layer, int row0, int n) {
  const ModelConfig& c = model_.config();
  const ReconstructionSpan& span = *layer.reconstruction();
  const auto hd = size_t(c.head_dim), group = size_t(c.group()), n_heads = size_t(c.n_heads);
  if (output_grams_.size() != size_t(c.n_layers)) output_grams_.assign(size_t(c.n_layers), {});
  if (chunk_out_norms_.size() != size_t(c.n_layers)) chunk_out_norms_.assign(size_t(c.n_layers), {});
  std::vector<float>& grams = output_grams_[size_t(l)];
  if (grams.empty()) grams = output_grams(model_.layer(l).wo, c.n_heads, c.head_dim);
  const auto chunk = size_t(span.end - span.first);
  ChunkOutputNorms& memo = chunk_out_norms_[size_t(l)];
  if (memo.span != span.id) {
    // Per KV head and part of its slots, each row's value decoded once, then one quadratic form per
    // query head.
    memo.norms.assign(n_heads * chunk, 0.0f);
    constexpr size_t kParts = 8;
    auto task = [&](size_t index, size_t /*worker*/) {
      const size_t g = index / kParts, part = index % kParts;
      const HeadStore& head = layer.head(int(g));
      const auto n_slots = size_t(head.n_slots());
      std::vector<float> v(hd);
      for (auto s = int(n_slots * part / kParts); s < int(n_slots * (part + 1) / kParts); ++s) {
        const int64_t p = head.positions()[s];
        if (!head.live(s) || !span.in_chunk(p)) continue;
        head.load_value(s, v.data());
        for (size_t i = 0; i < group; ++i) {
          const size_t h = g * group + i;
          memo.norms[h * chunk + size_t(p - span.first)] =
              output_norm(grams.data() + h * hd * hd, v.data(), c.head_dim);
        }
      }
    };
    if (pool_ != nullptr) {
      pool_->parallel_for(size_t(c.n_kv_heads) * kParts, task);
    } else {
      for (size_t i = 0; i < size_t(c.n_kv_heads) * kParts; ++i) task(i, 0);
    }
    memo.span = span.id;
  }
  if (recon_out_.size() < n_heads * recon_ld_) recon_out_.resize(n_heads * recon_ld_);
  for (size_t g = 0; g < size_t(c.n_kv_heads); ++g) {
    const HeadStore& head = layer.head(int(g));
    for (size_t i = 0; i < group; ++i) {
      const size_t h = g * group + i;
      float* out = recon_out_.data() + h * recon_ld_;
      for (int s = 0; s < head.n_slots(); ++s) {
        const int64_t p = head.positions()[s];
        out[s] = head.live(s) && span.in_chunk(p) ? memo.norms[h * chunk + size_t(p - span.first)] : 0.0f;
      }
    }
  }
  if (recon_qscale_.size() < size_t(n)) recon_qscale_.resize(size_t(n));
  const auto dim = size_t(c.dim);
  for (int t = 0; t < n; ++t) {
    const float* x = xb_.data() + size_t(row0 + t) * dim;
    double sum = 0.0;
    for (size_t j = 0; j < dim; ++j) sum += double(x[j]) * double(x[j]);
    recon_qscale_[size_t(t)] = sum > 0.0 ? float(1.0 / std::sqrt(sum)) : 0.0f;
  }
}

}  // namespace squeezekv
