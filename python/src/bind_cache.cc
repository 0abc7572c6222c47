// The caches on numpy arrays: LayerCache.update / fetch on [batch, heads, seq, head_dim] blocks,
// ModelCache (one shared coordinator) and create_layer (KVCacheFactory::create).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <span>

#include "bindings.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"

namespace py = pybind11;

namespace squeezekv::python {
namespace {

// forcecast: float16 (or float64) input is converted to a contiguous float32 copy.
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

KVBlockView block_of(const FloatArray& a, const char* name) {
  require(a.ndim() == 4, std::string(name) + ".ndim", a.ndim(), "expected [batch, heads, seq, head_dim]");
  return {a.data(), checked_int(a.shape(0), name), checked_int(a.shape(1), name), checked_int(a.shape(2), name),
          checked_int(a.shape(3), name)};
}

void update(LayerCache& layer, const FloatArray& keys, const FloatArray& values) {
  const KVBlockView k = block_of(keys, "keys"), v = block_of(values, "values");
  py::gil_scoped_release release;
  layer.update(k, v);
}

// Every head's kept rows in position order as [batch, kv_heads, seq, head_dim] f32, seq being the
// fullest head's count; a head holding fewer rows is padded at the end with zeros and position -1.
py::tuple fetch_all(const LayerCache& layer) {
  const LayerRows& rows = layer.rows();
  const size_t n_heads = size_t(layer.n_heads()), dim = size_t(layer.config().head_dim);
  std::vector<FetchedRows> fetched;
  size_t seq = 0;
  for (int h = 0; h < layer.n_heads(); ++h) {
    fetched.push_back(layer.fetch(h));
    seq = std::max(seq, fetched.back().positions.size());
  }
  const std::vector<py::ssize_t> shape = {rows.n_batch, rows.n_kv_heads, py::ssize_t(seq), py::ssize_t(dim)};
  py::array_t<float> keys(shape), values(shape);
  py::array_t<int64_t> positions(std::vector<py::ssize_t>{rows.n_batch, rows.n_kv_heads, py::ssize_t(seq)});
  float* k = keys.mutable_data();
  float* v = values.mutable_data();
  int64_t* p = positions.mutable_data();
  std::fill_n(k, n_heads * seq * dim, 0.0f);
  std::fill_n(v, n_heads * seq * dim, 0.0f);
  std::fill_n(p, n_heads * seq, int64_t{-1});
  for (size_t h = 0; h < n_heads; ++h) {
    const FetchedRows& f = fetched[h];
    std::copy(f.keys.begin(), f.keys.end(), k + h * seq * dim);
    std::copy(f.values.begin(), f.values.end(), v + h * seq * dim);
    std::copy(f.positions.begin(), f.positions.end(), p + h * seq);
  }
  return py::make_tuple(keys, values, positions);
}

}  // namespace

void bind_cache(py::module_& m) {
  py::class_<LayerCache, std::unique_ptr<LayerCache>>(m, "LayerCache")
      .def("update", &update, py::arg("keys"), py::arg("values"),
           "Appends [batch, kv_heads, seq, head_dim] keys and values and evicts to the budget.")
      .def("fetch", &fetch_all, "(keys, values, positions) of the kept rows in position order.")
      .def("begin_prompt", &LayerCache::begin_prompt)
      .def("end_prompt", &LayerCache::end_prompt)
      .def("reset", &LayerCache::reset)
      .def_property_readonly("layer_index", &LayerCache::layer_index)
      .def_property_readonly(
          "sliding_window", [](const LayerCache& l) { return l.sliding() ? l.kind().window : 0; },
          "0 for a global (evicting) layer, W for a sliding one (the newest W positions)")
      .def_property_readonly("n_heads", &LayerCache::n_heads)
      .def_property_readonly("n_batch", [](const LayerCache& l) { return l.rows().n_batch; })
      .def_property_readonly("n_kv_heads", [](const LayerCache& l) { return l.rows().n_kv_heads; })
      .def_property_readonly("layer_budget", &LayerCache::layer_budget)
      .def_property_readonly("budget_final", &LayerCache::budget_final)
      .def_property_readonly("concentration", &LayerCache::concentration)
      .def_property_readonly("tokens_seen", &LayerCache::tokens_seen)
      .def_property_readonly("tokens_kept", py::overload_cast<>(&LayerCache::tokens_kept, py::const_))
      .def("tokens_kept_per_head",
           [](const LayerCache& l) {
             std::vector<int> kept;
             for (int h = 0; h < l.n_heads(); ++h) kept.push_back(l.tokens_kept(h));
             return kept;
           })
      .def_property_readonly("kept_bytes", &LayerCache::kept_bytes)
      .def_property_readonly("full_bytes", &LayerCache::full_bytes)
      .def_property_readonly("compression_ratio", &LayerCache::compression_ratio);

  py::class_<ModelCache, std::unique_ptr<ModelCache>>(m, "ModelCache")
      .def(py::init([](const KVCacheConfig& config, int n_layers, int n_kv_heads, int n_batch,
                       const std::vector<int32_t>& sliding_windows) {
             return std::make_unique<ModelCache>(config, n_layers, n_kv_heads, n_batch,
                                                 layer_kinds_from_windows(sliding_windows, n_layers));
           }),
           py::arg("config"), py::arg("n_layers"), py::arg("n_kv_heads") = 1, py::arg("n_batch") = 1,
           py::arg("sliding_windows") = std::vector<int32_t>{},
           "sliding_windows: one per layer, 0 for a global layer, W for one that slides over W positions")
      .def_property_readonly("n_layers", &ModelCache::n_layers)
      .def_property_readonly("sliding_windows", [](const ModelCache& c) { return sliding_windows_of(c.layer_kinds()); })
      .def(
          "layer",
          [](ModelCache& c, int i) -> LayerCache& {
            require(i >= 0 && i < c.n_layers(), "layer", i, "out of range [0, " + std::to_string(c.n_layers()) + ")");
            return c.layer(i);
          },
          py::return_value_policy::reference_internal)
      .def("budgets", &ModelCache::budgets)
      .def_property_readonly("is_final",
                             [](const ModelCache& c) { return !c.coordinator() || c.coordinator()->is_final(); })
      .def(
          "measurements",
          [](const ModelCache& c) { return c.coordinator() ? c.coordinator()->measurements() : std::vector<double>{}; })
      .def_property_readonly("kept_bytes", &ModelCache::kept_bytes)
      .def_property_readonly("sliding_kept_bytes", &ModelCache::sliding_kept_bytes)
      .def_property_readonly("evicting_kept_bytes", &ModelCache::evicting_kept_bytes)
      .def_property_readonly("full_bytes", &ModelCache::full_bytes)
      .def_property_readonly("compression_ratio", &ModelCache::compression_ratio)
      .def("begin_prompt", &ModelCache::begin_prompt)
      .def("end_prompt", &ModelCache::end_prompt)
      .def("reset", &ModelCache::reset);

  m.attr("MAX_CACHE_LAYERS") = kMaxCacheLayers;
  m.def(
      "create_layer",
      [](const KVCacheConfig& config, int n_kv_heads, int n_batch, int32_t sliding_window) {
        const std::vector<LayerKind> kind = layer_kinds_from_windows(std::span(&sliding_window, 1), 1);
        return KVCacheFactory::create(config, n_kv_heads, n_batch, kind.front());
      },
      py::arg("config"), py::arg("n_kv_heads") = 1, py::arg("n_batch") = 1, py::arg("sliding_window") = 0,
      "One layer without a coordinator (KVCacheFactory::create); sliding_window W > 0: a sliding layer.");
}

}  // namespace squeezekv::python
