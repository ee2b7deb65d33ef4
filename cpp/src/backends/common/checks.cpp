// The backends' shared host-side checks (checks.h).
#include "backends/common/checks.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensoracle/errors.h"

namespace tensoracle::backends::common {

void Fail::operator()(const std::string& what) const { throw InvalidArgument(prefix_ + what); }

std::string tn(DataType t) { return std::string(type_name(t)); }
std::string desc(const TensorRef& t) { return tn(t.type) + t.dims.str(); }
std::string num(std::int64_t v) { return std::to_string(v); }
bool is_float_type(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }

namespace {

template <std::size_t N>
const char* name_in(const char* const (&names)[N], std::int32_t op) {
  return op >= 0 && op < static_cast<std::int32_t>(N) ? names[op] : "an unknown operation";
}

}  // namespace

// In the order of the enums' values (tensoracle/network.h).
const char* elementwise_name(ElementWiseOperation op) {
  static const char* const names[] = {"SUM", "PROD", "MAX", "MIN", "SUB",   "DIV",     "POW",
                                      "FLOOR_DIV", "AND", "OR", "XOR", "EQUAL", "GREATER", "LESS"};
  return name_in(names, static_cast<std::int32_t>(op));
}

const char* reduce_name(ReduceOperation op) {
  static const char* const names[] = {"SUM", "PROD", "MAX", "MIN", "AVG"};
  return name_in(names, static_cast<std::int32_t>(op));
}

const char* unary_name(UnaryOperation op) {
  static const char* const names[] = {"EXP",   "LOG",   "SQRT",  "RECIP", "ABS",   "NEG", "SIN",  "COS",   "TAN",
                                      "SINH",  "COSH",  "ASIN",  "ACOS",  "ATAN",  "ASINH", "ACOSH", "ATANH",
                                      "CEIL",  "FLOOR", "ERF",   "NOT",   "SIGN",  "ROUND", "ISINF", "ISNAN"};
  return name_in(names, static_cast<std::int32_t>(op));
}

std::int64_t checked_volume(const Fail& fail, const TensorRef& t, const char* kernel, const char* name) {
  if (!is_valid(t.type)) fail(std::string(kernel) + ": " + name + " has an invalid data type");
  const std::int64_t n = t.dims.volume();
  if (n < 0) fail(std::string(kernel) + ": " + name + " has dims " + t.dims.str() + " that are not fully known");
  if (n > 0 && t.data == nullptr) fail(std::string(kernel) + ": " + name + " has no data");
  return n;
}

void check_float(const Fail& fail, const TensorRef& t, const char* kernel, const char* name) {
  if (!is_float_type(t.type))
    fail(std::string(kernel) + ": " + name + " has type " + tn(t.type) + "; it takes float32, float16 or bfloat16");
}

void strides_of(const Dims& d, i64* s) {
  i64 acc = 1;
  for (int k = d.rank() - 1; k >= 0; --k) {
    s[k] = acc;
    acc *= d[k];
  }
}

i64 prod(const Dims& d, int from, int to) {
  i64 p = 1;
  for (int k = from; k < to; ++k) p *= d[k];
  return p;
}

}  // namespace tensoracle::backends::common
