// Internal to the extension module: one function per binding file.
#pragma once

#include <nanobind/nanobind.h>

namespace tensoracle::python {

void bind_errors(nanobind::module_& m);
void bind_safetensors(nanobind::module_& m);
void bind_network(nanobind::module_& m);
void bind_engine(nanobind::module_& m);
void bind_cache(nanobind::module_& m);
void bind_convert(nanobind::module_& m);
void bind_compare(nanobind::module_& m);

}  // namespace tensoracle::python
