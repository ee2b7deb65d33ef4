// Internal to the extension: NumPy arrays <-> tensoracle types (bf16 and fp8 via ml_dtypes).
#pragma once

#include <nanobind/nanobind.h>

#include "tensoracle/engine.h"
#include "tensoracle/types.h"

namespace tensoracle::python {

// A C-contiguous NumPy array for `obj` (converted if needed) and its tensoracle type. Throws
// InvalidArgument naming `what` for dtypes with no tensoracle type (float64, complex, object).
struct ArrayView {
  nanobind::object array;  // keeps the data alive
  DataType type;
  Dims dims;
  const void* data;
  std::size_t nbytes;
};
ArrayView array_view(nanobind::handle obj, const std::string& what);

// A NumPy array owning `t`'s memory (no copy).
nanobind::object to_numpy(const HostTensor& t);

// The NumPy dtype object for a tensoracle type.
nanobind::object numpy_dtype(DataType t);

}  // namespace tensoracle::python

// Dims <-> tuple of ints (any sequence of ints converts to Dims).
namespace nanobind::detail {
template <>
struct type_caster<tensoracle::Dims> {
  NB_TYPE_CASTER(tensoracle::Dims, const_name("tuple[int, ...]"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept;
  static handle from_cpp(const tensoracle::Dims& d, rv_policy, cleanup_list*) noexcept;
};
}  // namespace nanobind::detail
