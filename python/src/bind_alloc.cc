// The allocators and the concentration proxy as free functions.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "squeezekv/alloc/concentration.h"
#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/base/errors.h"

namespace py = pybind11;

namespace squeezekv::python {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// [n, D] -> one layer's score; [..., n, D] -> the mean over the leading (head) axes.
double concentration(const FloatArray& keys) {
  require(keys.ndim() >= 2, "keys.ndim", keys.ndim(), "expected [..., n_rows, head_dim]");
  const auto nd = size_t(keys.ndim());
  const int dim = checked_int(keys.shape(py::ssize_t(nd - 1)), "keys.head_dim");
  const int n = checked_int(keys.shape(py::ssize_t(nd - 2)), "keys.n_rows");
  require(dim >= 1, "keys.head_dim", dim, "must be >= 1");
  long long heads = 1;
  for (size_t i = 0; i + 2 < nd; ++i) heads *= keys.shape(py::ssize_t(i));
  if (heads == 0) return 0.0;
  return concentration_score(keys.data(), checked_int(heads, "keys.heads"), n, dim);
}

}  // namespace

void bind_alloc(py::module_& m) {
  m.def(
      "squeeze_budgets",
      [](const std::vector<double>& concentrations, int avg_budget, int n_sink, double strength) {
        return squeeze_budgets(concentrations, avg_budget, n_sink, strength);
      },
      py::arg("concentrations"), py::arg("avg_budget"), py::arg("n_sink") = 4, py::arg("strength") = 1.0);
  m.def("pyramid_budgets", &pyramid_budgets, py::arg("n_layers"), py::arg("avg_budget"), py::arg("n_sink") = 4,
        py::arg("beta") = 2.0);
  m.def("concentration_score", &concentration, py::arg("keys"));
}

}  // namespace squeezekv::python
