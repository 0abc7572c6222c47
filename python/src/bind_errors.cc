// squeezekv's C++ errors as Python exceptions: bad parameters are ValueError (the message names
// the parameter), a missing or malformed file is FormatError, both an OSError and a ValueError.
#include <climits>
#include <cstring>

#include "bindings.h"
#include "squeezekv/base/errors.h"

namespace py = pybind11;

namespace squeezekv::python {
namespace {

PyObject* format_error = nullptr;  // owned by the module once added to it

// PyErr_SetString fails (leaving an empty or decoding error) on a message quoting bad UTF-8 from a
// file; invalid bytes become U+FFFD instead.
void set_error(PyObject* type, const char* what) {
  PyObject* text = PyUnicode_DecodeUTF8(what, Py_ssize_t(std::strlen(what)), "replace");
  if (text == nullptr) return;  // the decoding error is set
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

}  // namespace

int checked_int(long long value, const char* name) {
  require(value >= INT_MIN && value <= INT_MAX, name, value, "does not fit a 32-bit int");
  return int(value);
}

void bind_errors(py::module_& m) {
  py::tuple bases = py::make_tuple(py::handle(PyExc_OSError), py::handle(PyExc_ValueError));
  format_error = PyErr_NewException("squeezekv.FormatError", bases.ptr(), nullptr);
  if (format_error == nullptr) throw py::error_already_set();
  m.add_object("FormatError", py::handle(format_error));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      set_error(PyExc_ValueError, e.what());
    } catch (const FormatError& e) {
      set_error(format_error, e.what());
    }
  });
}

}  // namespace squeezekv::python
