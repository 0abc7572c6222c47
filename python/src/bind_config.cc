// NativeConfig: the C++ KVCacheConfig field by field (C++ names); the Python KVCacheConfig with
// the seed's names converts to it. Enums travel as the command line's strings.
#include <pybind11/stl.h>

#include "bindings.h"
#include "squeezekv/core/kv_cache_config.h"
#include "squeezekv/methods/method_registry.h"

namespace py = pybind11;

namespace squeezekv::python {

void bind_config(py::module_& m) {
  py::class_<KVCacheConfig>(m, "NativeConfig")
      .def(py::init<>())
      .def_readwrite("method", &KVCacheConfig::method)
      .def_readwrite("head_dim", &KVCacheConfig::head_dim)
      .def_readwrite("budget", &KVCacheConfig::budget)
      .def_readwrite("n_sink", &KVCacheConfig::n_sink)
      .def_readwrite("strength", &KVCacheConfig::strength)
      .def_readwrite("resolved_budget", &KVCacheConfig::resolved_budget)
      .def_readwrite("recent", &KVCacheConfig::recent)
      .def_readwrite("decay", &KVCacheConfig::decay)
      .def_property(
          "score", [](const KVCacheConfig& c) { return to_string(c.score); },
          [](KVCacheConfig& c, const std::string& s) { c.score = parse_score_source(s); })
      .def_property(
          "kv_type", [](const KVCacheConfig& c) { return to_string(c.kv_type); },
          [](KVCacheConfig& c, const std::string& s) { c.kv_type = parse_kv_type(s); })
      .def_readwrite("policy", &KVCacheConfig::policy)
      .def_readwrite("allocator", &KVCacheConfig::allocator)
      .def_readwrite("beta", &KVCacheConfig::beta)
      .def_readwrite("chunk_size", &KVCacheConfig::chunk_size)
      .def_readwrite("window", &KVCacheConfig::window)
      .def_readwrite("kernel", &KVCacheConfig::kernel)
      .def_property(
          "importance", [](const KVCacheConfig& c) { return to_string(c.importance); },
          [](KVCacheConfig& c, const std::string& s) { c.importance = parse_importance(s); })
      .def_readwrite("squeeze_fraction", &KVCacheConfig::squeeze_fraction)
      .def("validate", &KVCacheConfig::validate)
      .def_property_readonly("resolved_policy", [](const KVCacheConfig& c) { return resolved_policy(c); })
      .def_property_readonly("resolved_allocator", [](const KVCacheConfig& c) { return resolved_allocator(c); });

  m.def("methods", [] {
    py::list out;
    for (const MethodInfo& info : all_methods()) {
      py::dict d;
      d["id"] = std::string(info.id);
      d["policy"] = std::string(info.policy);
      d["allocator"] = std::string(info.allocator);
      d["summary"] = std::string(info.summary);
      d["parameters"] = std::string(info.parameters);
      d["when_to_use"] = std::string(info.when_to_use);
      out.append(d);
    }
    return out;
  }, "Every method id with its policy, allocator, parameters and when to use it.");
}

}  // namespace squeezekv::python
