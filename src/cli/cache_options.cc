#include "cli/cache_options.h"

namespace squeezekv::cli {

KVCacheConfig CacheOptions::resolve() const {
  KVCacheConfig c = config;
  c.score = parse_score_source(score);
  c.kv_type = parse_kv_type(kv_type);
  c.positions = parse_position_rule(positions);
  c.importance = parse_importance(importance);
  c.validate();
  return c;
}

void add_cache_options(CLI::App& app, CacheOptions& o, bool with_budget, bool with_strength) {
  KVCacheConfig& c = o.config;
  app.add_option("--method", c.method, "eviction method (see `squeezekv methods`)")
      ->capture_default_str()->group("Cache");
  app.add_option("--policy", c.policy, "override the method's token policy: full, cumulative, "
                 "chunked, tova, streaming, window, snapkv")->group("Cache");
  app.add_option("--allocator", c.allocator, "override the method's layer allocator: none, "
                 "uniform, pyramid, squeeze")->group("Cache");
  if (with_budget) {
    app.add_option("--budget", c.budget, "average rows kept per layer and KV head")
        ->capture_default_str()->group("Cache");
  }
  app.add_option("--sinks", c.n_sink, "first positions never evicted (attention sinks)")
      ->capture_default_str()->group("Cache");
  if (with_strength) {
    app.add_option("--strength", c.strength, "squeeze: 0 = uniform (h2o), 1 = full reallocation")
        ->capture_default_str()->group("Cache");
  }
  app.add_option("--recent", c.recent, "share of (budget - sinks) kept as the newest rows")
      ->capture_default_str()->group("Cache");
  app.add_option("--decay", c.decay, "score decay per token in (0, 1]; 1 = off")
      ->capture_default_str()->group("Cache");
  app.add_option("--score", o.score, "score source: key-proxy or attention")
      ->capture_default_str()->group("Cache");
  app.add_option("--kv-type", o.kv_type, "stored K/V type: f16 or f32")
      ->capture_default_str()->group("Cache");
  app.add_option("--positions", o.positions, "RoPE positions of an evicting cache: cache (rank "
                 "among the rows held) or text (position in the text)")
      ->capture_default_str()->group("Cache");
  app.add_option("--beta", c.beta, "pyramidkv: taper steepness (>= 1)")
      ->capture_default_str()->group("Method parameters");
  app.add_option("--chunk-size", c.chunk_size, "chunkkv: positions per evicted chunk")
      ->capture_default_str()->group("Method parameters");
  app.add_option("--window", c.window, "snapkv: observation window (last prompt queries)")
      ->capture_default_str()->group("Method parameters");
  app.add_option("--kernel", c.kernel, "snapkv: average-pool width (odd)")
      ->capture_default_str()->group("Method parameters");
  app.add_option("--importance", o.importance, "squeeze: key-dispersion or hidden-cosine")
      ->capture_default_str()->group("Method parameters");
  app.add_option("--squeeze-fraction", c.squeeze_fraction,
                 "squeeze (hidden-cosine): budget share of the least important layers")
      ->capture_default_str()->group("Method parameters");
}

}  // namespace squeezekv::cli
