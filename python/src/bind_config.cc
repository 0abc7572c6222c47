// NativeConfig: the C++ KVCacheConfig (C++ names), every registered parameter by name; the Python
// KVCacheConfig with the reference library's names converts to it. `parameters()` is the registry
// the Python keywords are generated from.
#include <pybind11/stl.h>

#include "bindings.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace py = pybind11;

namespace squeezekv::python {
namespace {

py::object to_python(const ParamValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return py::int_(*i);
  if (const auto* d = std::get_if<double>(&value)) return py::float_(*d);
  return py::str(std::get<std::string>(value));
}

const char* kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::integer:
      return "int";
    case ParamKind::real:
      return "float";
    case ParamKind::choice:
      return "choice";
    case ParamKind::text:
      return "str";
  }
  return "str";
}

}  // namespace

void bind_config(py::module_& m) {
  py::class_<KVCacheConfig>(m, "NativeConfig")
      .def(py::init<>())
      // set(name, text): the value as text, parsed and range-checked by the parameter's spec.
      .def("set", [](KVCacheConfig& c, const std::string& name, const std::string& text) { c.set(name, text); })
      .def("get",
           [](const KVCacheConfig& c, const std::string& name) {
             const ParamValue v = c.get(name);
             if (name == "resolved_budget" && std::holds_alternative<std::string>(v)) return py::object(py::none());
             return to_python(v);
           })
      .def("__getattr__",
           [](const KVCacheConfig& c, const std::string& name) {
             if (find_param(name) == nullptr) throw py::attribute_error("NativeConfig has no parameter " + name);
             const ParamValue v = c.get(name);
             if (name == "resolved_budget" && std::holds_alternative<std::string>(v)) return py::object(py::none());
             return to_python(v);
           })
      .def("validate", &KVCacheConfig::validate)
      .def_property_readonly("resolved_policy", [](const KVCacheConfig& c) { return resolved_policy(c); })
      .def_property_readonly("resolved_allocator", [](const KVCacheConfig& c) { return resolved_allocator(c); })
      .def_property_readonly("resolved_head_split", [](const KVCacheConfig& c) { return resolved_head_split(c); })
      .def_property_readonly("schedule_waits_for_measurement",
                             [](const KVCacheConfig& c) { return schedule_waits_for_measurement(c); });

  m.def(
      "parameters",
      [] {
        py::list out;
        for (const ParamSpec* spec : all_params()) {
          py::dict d;
          d["name"] = std::string(spec->name);
          d["kind"] = kind_name(spec->kind);
          d["default"] = std::string(spec->default_value);
          d["help"] = std::string(spec->help);
          d["optional"] = spec->optional;
          py::list owners;
          for (const std::string& o : param_owners(spec->name)) owners.append(o);
          d["owners"] = owners;
          out.append(d);
        }
        return out;
      },
      "Every registered parameter: name, kind, default (text), help, owners.");

  m.def(
      "methods",
      [] {
        py::list out;
        for (const MethodInfo& info : all_methods()) {
          py::dict d;
          d["id"] = std::string(info.id);
          d["policy"] = std::string(info.policy);
          d["allocator"] = std::string(info.allocator);
          d["head_split"] = info.head_split.empty() ? std::string("uniform") : std::string(info.head_split);
          d["summary"] = std::string(info.summary);
          std::string params;
          py::dict defaults;
          for (const ParamSpec* spec : method_params(info)) {
            const std::string value = method_default(info, *spec);
            // Appended piece by piece: chained operator+ trips a false -Wstringop-overflow in g++ 12.
            if (!params.empty()) params += ' ';
            params += spec->name;
            params += '=';
            params += value;
            defaults[py::str(std::string(spec->name))] = value;
          }
          d["parameters"] = params.empty() ? std::string("none") : params;
          d["defaults"] = defaults;
          d["when_to_use"] = std::string(info.when_to_use);
          out.append(d);
        }
        return out;
      },
      "Every method id with its policy, allocator, parameters and when to use it.");
}

}  // namespace squeezekv::python
