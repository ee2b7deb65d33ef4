// tensoracle._native: the C++ core for Python. Everything here converts; nothing decides.
#include <Python.h>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "tensoracle/builder.h"
#include "tensoracle/errors.h"

namespace nb = nanobind;

namespace tensoracle::python {

namespace {
// `bases` may be one class or a tuple of classes (PyErr_NewException accepts both).
template <typename E>
nb::object define(nb::module_& m, const char* name, nb::handle bases) {
  nb::object cls = nb::borrow(nb::exception<E>(m, name, bases.ptr()));
  cls.attr("__module__") = "tensoracle";  // shown as tensoracle.FormatError, where users import it
  return cls;
}
}  // namespace

void bind_errors(nb::module_& m) {
  // Registered base-to-derived: nanobind tries the newest translator first, so a derived C++
  // class is matched before its base. Each class derives from tensoracle.Error and from the
  // builtin that fits it: ValueError for bad input, RuntimeError for failed work.
  nb::object error = define<Error>(m, "Error", PyExc_Exception);
  auto both = [&](PyObject* builtin) { return nb::make_tuple(error, nb::handle(builtin)); };
  define<InvalidArgument>(m, "InvalidArgument", both(PyExc_ValueError));
  nb::object format = define<FormatError>(m, "FormatError", both(PyExc_ValueError));
  define<UnsafeCheckpointError>(m, "UnsafeCheckpointError", format);
  nb::object build = define<BuildError>(m, "BuildError", both(PyExc_RuntimeError));
  define<BuildCancelled>(m, "BuildCancelled", build);
  define<CorruptEngineError>(m, "CorruptEngineError", both(PyExc_RuntimeError));
  define<IncompatibleEngineError>(m, "IncompatibleEngineError", both(PyExc_RuntimeError));
  define<EngineIOError>(m, "EngineIOError", both(PyExc_ValueError));
  define<PluginLibraryError>(m, "PluginLibraryError", both(PyExc_RuntimeError));
  define<UnsupportedError>(m, "UnsupportedError", both(PyExc_RuntimeError));
  // System-call failures become OSError (FileNotFoundError, PermissionError, ...).
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const IoError& e) {
      nb::object args = nb::make_tuple(e.errno_value(), e.what(), e.path());
      PyErr_SetObject(PyExc_OSError, args.ptr());
    }
  });
}

}  // namespace tensoracle::python

NB_MODULE(_native, m) {
  m.doc() = "tensoracle's C++ core (internal: import tensoracle instead)";
  tensoracle::python::bind_errors(m);
  tensoracle::python::bind_safetensors(m);
  tensoracle::python::bind_plugins(m);
  tensoracle::python::bind_network(m);
  tensoracle::python::bind_engine(m);
  tensoracle::python::bind_cache(m);
  tensoracle::python::bind_convert(m);
  tensoracle::python::bind_compare(m);
  tensoracle::python::bind_onnx(m);
}
