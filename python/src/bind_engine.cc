// The engine from Python: load a GGUF model, tokens, generate and perplexity (one shared full
// pass for any number of cache configurations). Results are plain dicts and lists.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "bindings.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/utf8.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/engine/generate.h"
#include "squeezekv/eval/perplexity.h"

namespace py = pybind11;

namespace squeezekv::python {
namespace {

std::unique_ptr<ThreadPool> make_pool(int threads) {
  require(threads >= 0, "threads", threads, "must be >= 0 (0 = every core)");
  return std::make_unique<ThreadPool>(threads > 0 ? size_t(threads)
                                                  : std::max(1u, std::thread::hardware_concurrency()));
}

py::dict model_info(const Model& model) {
  const ModelConfig& c = model.config();
  py::dict d;
  d["arch"] = c.arch;
  d["name"] = valid_utf8(c.name);  // a model's name may hold invalid UTF-8
  d["n_layers"] = c.n_layers;
  d["n_heads"] = c.n_heads;
  d["n_kv_heads"] = c.n_kv_heads;
  d["head_dim"] = c.head_dim;
  d["dim"] = c.dim;
  d["vocab"] = c.vocab;
  d["context_length"] = c.context_length;
  std::vector<int> windows;  // per layer: 0 global, W sliding (what its cache holds)
  for (const LayerConfig& lc : c.layers) windows.push_back(lc.attention == AttentionKind::sliding ? lc.window : 0);
  d["layer_windows"] = windows;
  d["n_params"] = model.n_params();
  d["repacked_bytes"] = model.repacked_bytes();
  return d;
}

// A model's cache that outlives one generate call (engine/cache_file.h): loaded from a file, or
// filled by generate, and saved; it knows the tokens it has seen.
struct EngineCache {
  std::shared_ptr<const Model> model;
  std::unique_ptr<ModelCache> cache;
  std::vector<int32_t> tokens;
};

std::shared_ptr<EngineCache> load_engine_cache(const std::shared_ptr<const Model>& model, const std::string& path) {
  LoadedCache loaded = load_cache_file(path, *model);
  return std::make_shared<EngineCache>(EngineCache{model, std::move(loaded.cache), std::move(loaded.contents.tokens)});
}

py::dict run_generate(const std::shared_ptr<const Model>& model_ptr, const KVCacheConfig& config,
                      const std::string& prompt, GenerateOptions options, int threads,
                      const std::function<void(int32_t)>& on_token, EngineCache* given, const std::string& save_path) {
  const Model& model = *model_ptr;
  auto pool = make_pool(threads);
  Engine engine(model, pool.get());
  if (!save_path.empty()) check_cache_file_writable(save_path);
  std::unique_ptr<ModelCache> own;
  std::vector<int32_t> history;
  std::vector<int32_t> prompt_tokens = model.tokenizer().encode(prompt, true);
  if (given != nullptr) {
    require(given->model.get() == &model, "cache", "another model's",
            "a cache continues with the model it was made for");
    options.continue_cache = given->cache->layer(0).tokens_seen() > 0;
    if (options.continue_cache) {
      prompt_tokens = continuation_tokens(given->tokens, prompt_tokens, model.tokenizer().encode(prompt, false));
      require(!prompt_tokens.empty(), "prompt", prompt,
              "adds no token to the " + std::to_string(given->tokens.size()) + " tokens the cache has seen");
      history = given->tokens;
    }
  } else {
    own = engine.make_cache(config);
  }
  ModelCache* cache = given != nullptr ? given->cache.get() : own.get();
  options.feed_last = !save_path.empty();
  std::function<void(int32_t)> stream;
  if (on_token)
    stream = [&on_token](int32_t t) {
      py::gil_scoped_acquire acquire;
      on_token(t);
    };
  GenerateResult r;
  {
    py::gil_scoped_release release;
    r = generate(engine, *cache, prompt_tokens, options, stream);
  }
  history.insert(history.end(), r.prompt_tokens.begin(), r.prompt_tokens.end());
  history.insert(history.end(), r.tokens.begin(), r.tokens.begin() + long(r.n_fed));
  if (given != nullptr) given->tokens = history;
  if (!save_path.empty()) save_cache_file(save_path, model, *cache, history);
  std::vector<int> kept;
  for (int l = 0; l < cache->n_layers(); ++l) kept.push_back(cache->layer(l).rows_per_head());
  py::dict d;
  d["text"] = valid_utf8(model.tokenizer().decode(r.tokens));  // raw ids stay in "tokens"
  d["tokens"] = r.tokens;
  d["prompt_tokens"] = r.prompt_tokens;
  d["stopped_at_eos"] = r.stopped_at_eos;
  d["prompt_tokens_per_second"] = r.prompt_tokens_per_second();
  d["decode_tokens_per_second"] = r.decode_tokens_per_second();
  d["layer_schedule"] = cache->scheduled_budgets();  // the allocator's; layer_budgets: conserved
  d["layer_budgets"] = cache->budgets();
  d["layer_kept"] = kept;
  d["kept_bytes"] = cache->kept_bytes();
  d["sliding_kept_bytes"] = cache->sliding_kept_bytes();          // the windows of the sliding layers
  d["evicting_kept_bytes"] = cache->evicting_kept_bytes();        // the layers the method evicts in
  d["layer_windows"] = sliding_windows_of(cache->layer_kinds());  // 0: global, W: sliding
  d["full_bytes"] = cache->full_bytes();
  d["compression_ratio"] = cache->compression_ratio();
  d["repeated_4gram_share"] = repeated_ngram_share(r.tokens, 4);
  return d;
}

py::list run_perplexity(const Model& model, const std::vector<int32_t>& tokens,
                        const std::vector<KVCacheConfig>& configs, const PerplexityOptions& options, int threads) {
  auto pool = make_pool(threads);
  Engine engine(model, pool.get());
  std::vector<KVCacheConfig> shaped = configs;
  for (KVCacheConfig& c : shaped) c.head_dim = model.config().head_dim;
  std::vector<PerplexityResult> results;
  {
    py::gil_scoped_release release;
    results = evaluate_perplexity(engine, tokens, shaped, options);
  }
  py::list out;
  for (const PerplexityResult& r : results) {
    py::dict d;
    d["chunks"] = r.chunks;
    d["scored"] = r.scored;
    d["mean_nll"] = r.mean_nll;
    d["perplexity"] = r.perplexity;
    d["mean_kl"] = r.mean_kl;
    d["top1_agreement"] = r.top1_agreement;
    d["mean_kept_bytes"] = r.mean_kept_bytes;
    d["peak_kept_bytes"] = r.peak_kept_bytes;
    d["mean_full_bytes"] = r.mean_full_bytes;
    d["peak_full_bytes"] = r.peak_full_bytes;
    d["mean_sliding_kept_bytes"] = r.mean_sliding_kept_bytes;
    d["peak_sliding_kept_bytes"] = r.peak_sliding_kept_bytes;
    d["mean_evicting_kept_bytes"] = r.mean_evicting_kept_bytes;
    d["peak_evicting_kept_bytes"] = r.peak_evicting_kept_bytes;
    d["layer_windows"] = r.layer_windows;
    d["layer_budgets"] = r.layer_budgets;
    d["layer_mean_kept"] = r.layer_mean_kept;
    d["layer_importance"] = r.layer_importance;  // what a measuring allocator read per layer
    d["seconds"] = r.seconds;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def_static(
          "load",
          [](const std::string& path, bool repack) {
            return std::make_shared<Model>(Model::load(path, {.repack = repack}));
          },
          py::arg("path"), py::arg("repack") = true)
      .def("info", &model_info)
      .def(
          "tokenize",
          [](const Model& model, const std::string& text, bool add_bos) {
            return model.tokenizer().encode(text, add_bos);
          },
          py::arg("text"), py::arg("add_bos") = true)
      .def(
          "tokenize_file",
          [](const Model& model, const std::string& path) { return tokenize_text_file(model.tokenizer(), path); },
          py::arg("path"))
      .def(
          "detokenize",
          [](const Model& model, const std::vector<int32_t>& tokens) {
            return valid_utf8(model.tokenizer().decode(tokens));  // a split character becomes U+FFFD
          },
          py::arg("tokens"));

  py::class_<EngineCache, std::shared_ptr<EngineCache>>(m, "EngineCache")
      .def("save",
           [](const EngineCache& c, const std::string& path) { save_cache_file(path, *c.model, *c.cache, c.tokens); })
      .def_property_readonly("tokens", [](const EngineCache& c) { return c.tokens; })
      .def_property_readonly("config", [](const EngineCache& c) { return c.cache->config(); })
      .def_property_readonly("kept_bytes", [](const EngineCache& c) { return c.cache->kept_bytes(); })
      .def_property_readonly("full_bytes", [](const EngineCache& c) { return c.cache->full_bytes(); })
      .def_property_readonly("layer_budgets", [](const EngineCache& c) { return c.cache->budgets(); });
  m.def("load_cache", &load_engine_cache, py::arg("model"), py::arg("path"));
  m.def(
      "new_cache",
      [](const std::shared_ptr<const Model>& model, const KVCacheConfig& config) {
        Engine engine(*model, nullptr);
        return std::make_shared<EngineCache>(EngineCache{model, engine.make_cache(config), {}});
      },
      py::arg("model"), py::arg("config"));

  m.def(
      "generate",
      [](const std::shared_ptr<const Model>& model, const KVCacheConfig& config, const std::string& prompt,
         int n_predict, int n_batch, int n_ctx, float temperature, int top_k, float top_p, uint64_t seed, int threads,
         const std::function<void(int32_t)>& on_token, EngineCache* cache, const std::string& save_path) {
        GenerateOptions options;
        options.n_predict = n_predict;
        options.n_batch = n_batch;
        options.n_ctx = n_ctx;
        options.sampler = {temperature, top_k, top_p, seed};
        return run_generate(model, config, prompt, options, threads, on_token, cache, save_path);
      },
      py::arg("model"), py::arg("config"), py::arg("prompt"), py::arg("n_predict"), py::arg("n_batch"),
      py::arg("n_ctx"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("seed"), py::arg("threads"),
      py::arg("on_token"), py::arg("cache") = nullptr, py::arg("save_path") = "");

  m.def(
      "perplexity",
      [](const Model& model, const std::vector<int32_t>& tokens, const std::vector<KVCacheConfig>& configs, int n_ctx,
         int n_batch, int max_chunks, int threads) {
        return run_perplexity(model, tokens, configs, PerplexityOptions{n_ctx, n_batch, max_chunks}, threads);
      },
      py::arg("model"), py::arg("tokens"), py::arg("configs"), py::arg("n_ctx"), py::arg("n_batch"),
      py::arg("max_chunks"), py::arg("threads"));
}

}  // namespace squeezekv::python
