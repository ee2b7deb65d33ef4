// Internal to the extension module: one function per binding file.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensoracle/engine.h"
#include "tensoracle/network.h"

namespace tensoracle::python {

void bind_errors(nanobind::module_& m);
void bind_safetensors(nanobind::module_& m);
void bind_network(nanobind::module_& m);
void bind_engine(nanobind::module_& m);
void bind_cache(nanobind::module_& m);
void bind_convert(nanobind::module_& m);
void bind_compare(nanobind::module_& m);
void bind_plugins(nanobind::module_& m);
void bind_onnx(nanobind::module_& m);

// An Execution as Python holds it: the arrays bound to its tensors with set_tensor_address are
// kept here while they are bound, so that freeing them in Python cannot leave the execution
// with a dangling address (engine_bindings.cpp). Engine.create_execution makes them.
struct PyExecution : Execution {
  explicit PyExecution(Execution e) : Execution(std::move(e)) {}
  std::map<std::string, nanobind::ndarray<nanobind::ro>, std::less<>> bound;
  // TensorRT's IOutputAllocator objects, per output (set_output_allocator): asked for each
  // output's memory before every run and told its shape after it.
  std::map<std::string, nanobind::object, std::less<>> allocators;
};

// The Python object for the network the builder lends to a graph function. It shares the
// builder's ownership of the network (builder.h), and every layer or tensor taken from it keeps
// it alive (reference_internal), so what a graph function keeps stays valid after the build.
nanobind::object network_for_graph(Network& net);

// `with obj as x:` as TensorRT's Python objects allow (its samples open builders, networks,
// engines and contexts so): __enter__ gives the object, __exit__ keeps it (Python frees it when
// its last reference goes) and lets exceptions through.
template <typename C>
void context_manager(C& cls) {
  using T = typename C::Type;
  cls.def("__enter__", [](T& self) -> T& { return self; }, nanobind::rv_policy::reference);
  cls.def("__exit__", [](T&, nanobind::args) { return false; });
}

// Plugin fields from Python: a dict {name: value} or PluginField-like objects (.name, .data,
// .type or None); values are NumPy arrays, numbers, str or bytes. Without a type, the
// registered creator's schema decides (plugin_bindings.cpp).
std::vector<PluginField> plugin_fields_from(nanobind::handle fields, const std::string& plugin_namespace,
                                            const std::string& name, const std::string& version);

}  // namespace tensoracle::python
