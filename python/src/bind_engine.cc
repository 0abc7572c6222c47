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

py::dict run_generate(const Model& model, const KVCacheConfig& config, const std::string& prompt,
                      const GenerateOptions& options, int threads, const std::function<void(int32_t)>& on_token) {
  auto pool = make_pool(threads);
  Engine engine(model, pool.get());
  auto cache = engine.make_cache(config);
  std::function<void(int32_t)> stream;
  if (on_token)
    stream = [&on_token](int32_t t) {
      py::gil_scoped_acquire acquire;
      on_token(t);
    };
  GenerateResult r;
  {
    py::gil_scoped_release release;
    r = generate(engine, *cache, prompt, options, stream);
  }
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

  m.def(
      "generate",
      [](const Model& model, const KVCacheConfig& config, const std::string& prompt, int n_predict, int n_batch,
         int n_ctx, float temperature, int top_k, float top_p, uint64_t seed, int threads,
         const std::function<void(int32_t)>& on_token) {
        GenerateOptions options;
        options.n_predict = n_predict;
        options.n_batch = n_batch;
        options.n_ctx = n_ctx;
        options.sampler = {temperature, top_k, top_p, seed};
        return run_generate(model, config, prompt, options, threads, on_token);
      },
      py::arg("model"), py::arg("config"), py::arg("prompt"), py::arg("n_predict"), py::arg("n_batch"),
      py::arg("n_ctx"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("seed"), py::arg("threads"),
      py::arg("on_token"));

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
