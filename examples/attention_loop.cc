// squeezekv inside a hand-written attention loop (C++): a toy decoder of L layers and H KV heads
// runs a 64-token prompt in one step, then decodes one token at a time. In every step each layer
// stores the new K/V in its cache, attends (causally) over the rows the cache kept, feeds the
// attention probabilities back (original H2O scoring) and lets the cache evict. The
// SqueezeAttention schedule is measured from the prompt once every layer has seen it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "squeezekv/cache/model_cache.h"
#include "squeezekv/ops/kv_rows.h"

namespace {

constexpr int kLayers = 4, kHeads = 2, kDim = 32, kPrompt = 64, kTokens = 200;

// Attention of n queries ([heads, n, dim]) at positions pos0.. over one layer's kept rows.
void attend(squeezekv::LayerCache& layer, const std::vector<float>& q, int n, int pos0) {
  std::vector<float> row(kDim), probs, out(kDim);
  for (int h = 0; h < kHeads; ++h) {
    const squeezekv::HeadStore& head = layer.head(h);
    const int slots = head.n_slots();
    probs.assign(size_t(n) * size_t(slots), 0.0f);  // [n, slots], what add_attention takes
    for (int i = 0; i < n; ++i) {
      const float* query = q.data() + (size_t(h) * size_t(n) + size_t(i)) * kDim;
      float* p = probs.data() + size_t(i) * size_t(slots);
      float max_logit = -INFINITY, sum = 0.0f;
      for (int s = 0; s < slots; ++s) {  // free slots and later positions stay masked (0)
        if (!head.live(s) || head.positions()[s] > pos0 + i) continue;
        head.load_key(s, row.data());  // any storage format, decoded
        float dot = 0.0f;
        for (int d = 0; d < kDim; ++d) dot += query[d] * row[size_t(d)];
        p[s] = dot / std::sqrt(float(kDim));
        max_logit = std::max(max_logit, p[s]);
      }
      for (int s = 0; s < slots; ++s) {
        const bool used = head.live(s) && head.positions()[s] <= pos0 + i;
        p[s] = used ? std::exp(p[s] - max_logit) : 0.0f;
        sum += p[s];
      }
      std::fill(out.begin(), out.end(), 0.0f);
      for (int s = 0; s < slots; ++s) {
        if (p[s] == 0.0f) continue;
        p[s] /= sum;
        head.load_value(s, row.data());
        for (int d = 0; d < kDim; ++d) out[size_t(d)] += p[s] * row[size_t(d)];
      }
      // (`out` would go on to the output projection.)
    }
    if (layer.wants_attention()) layer.add_attention(h, probs.data(), n);
  }
}

}  // namespace

int main() {
  squeezekv::KVCacheConfig config;
  config.method = "squeeze";
  config.head_dim = kDim;
  config.budget = 48;                                // average rows per layer and head
  config.score = squeezekv::ScoreSource::attention;  // we feed real attention back
  auto cache = squeezekv::KVCacheBuilder::for_model(kLayers, config, kHeads);

  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<float> q, k, v;
  for (int pos = 0; pos < kTokens;) {
    const int n = pos == 0 ? kPrompt : 1;
    q.resize(size_t(kHeads * n * kDim));  // [heads, n, dim], the cache's update layout
    k.resize(q.size());
    v.resize(q.size());
    for (int l = 0; l < kLayers; ++l) {
      // Toy projections: deeper layers' keys lean on one shared direction (more concentrated).
      const float lean = float(l) / float(kLayers - 1);
      for (size_t i = 0; i < q.size(); ++i) {
        q[i] = normal(rng);
        k[i] = (1.0f - lean) * normal(rng) + (i % kDim == 0 ? 3.0f * lean : 0.0f);
        v[i] = normal(rng);
      }
      squeezekv::LayerCache& layer = cache->layer(l);
      layer.begin_update(k.data(), v.data(), n);
      attend(layer, q, n, pos);
      layer.end_update();  // evict down to this layer's budget
    }
    pos += n;
  }

  int total = 0;
  for (int l = 0; l < kLayers; ++l) {
    const squeezekv::LayerCache& layer = cache->layer(l);
    std::printf("layer %d: concentration %.3f, budget %d, kept %d of %lld tokens\n", l, layer.concentration(),
                layer.layer_budget(), layer.tokens_kept(), static_cast<long long>(layer.tokens_seen()));
    total += layer.layer_budget();
  }
  std::printf("KV resident %zu bytes, a full cache %zu bytes (%.2fx)\n", cache->kept_bytes(), cache->full_bytes(),
              cache->compression_ratio());
  // The schedule conserves the total and gives the broad first layer more than the last.
  const bool ok =
      total == kLayers * config.budget && cache->layer(0).layer_budget() > cache->layer(kLayers - 1).layer_budget();
  return ok ? 0 : 1;
}
