// Internal to the op units (graph/ops/*.cpp): the checks several layers share, the JSON forms
// of values, and make_op, which builds a unit's OpTraits from its typed functions. Messages
// name the input or parameter, never the layer (graph::infer's caller adds it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "graph/json_values.h"
#include "graph/op.h"
#include "tensoracle/errors.h"

namespace tensoracle::graph::ops {

[[noreturn]] inline void invalid(const std::string& msg) { throw InvalidArgument(msg); }
inline std::string tname(DataType t) { return std::string(type_name(t)); }
inline bool is_float(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }
inline bool is_int(DataType t) { return t == DataType::kINT32 || t == DataType::kINT64; }

// Input `index` is float32, float16 or bfloat16 (`what` names the operation in the message).
void require_float(const TensorDesc& d, int index, const char* what);
// Inputs 0 and 1 have one type.
void require_same_type(std::span<const TensorDesc> in, const char* what);
// `axis` in [-rank, rank), made non-negative.
int normalize_axis(std::int32_t axis, int rank, const char* what);
// A bit mask of axes names no dimension beyond `rank`.
void check_axes(std::uint32_t axes, int rank, const char* what);

// Dims arithmetic on untrusted values (an engine file's plan, a caller's parameters) is done in
// 128 bits and brought back with narrow_dim, which refuses what does not fit 64: a signed
// overflow would be undefined behaviour, not an error.
__extension__ using Wide = __int128;
inline std::int64_t narrow_dim(Wide v, const std::string& what) {
  if (v > INT64_MAX || v < INT64_MIN) invalid(what + " does not fit in 64 bits");
  return static_cast<std::int64_t>(v);
}

// A unit's traits from its functions for parameters P: Infer(const P&, inputs, facts, full),
// ToJson(const P&) and FromJson(const json&) -> P (nullptr: never in a plan).
template <typename P, auto Infer, auto ToJson, auto FromJson>
constexpr OpTraits make_op(LayerType type, std::string_view name, InputArity arity) {
  static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(0), LayerParams>, InputParams>);
  OpTraits t{type, name, arity, nullptr, nullptr, nullptr};
  t.infer = [](const LayerParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
    return Infer(std::get<P>(p), in, facts, full);
  };
  t.to_json = [](const LayerParams& p) -> json { return ToJson(std::get<P>(p)); };
  if constexpr (!std::is_null_pointer_v<decltype(FromJson)>)
    t.from_json = [](const json& j) -> LayerParams { return FromJson(j); };
  return t;
}

}  // namespace tensoracle::graph::ops
