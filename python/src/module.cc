// squeezekv._native: the compiled half of the `squeezekv` package (python/squeezekv/ holds the
// Python half with the reference library's names).
#include "bindings.h"

PYBIND11_MODULE(_native, m) {
  m.doc() = "squeezekv's C++ core (use the squeezekv package, not this module)";
  squeezekv::python::bind_errors(m);
  squeezekv::python::bind_config(m);
  squeezekv::python::bind_cache(m);
  squeezekv::python::bind_alloc(m);
  squeezekv::python::bind_engine(m);
}
