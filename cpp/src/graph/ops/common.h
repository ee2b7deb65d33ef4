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
// overflow would be undefined behaviour, not an error. `what` names the value: a string, or a
// function returning one where the name is built (it runs only when the value does not fit:
// shape inference calls this on every shape change).
__extension__ using Wide = __int128;
template <typename What>
std::int64_t narrow_dim(Wide v, const What& what) {
  if (v > INT64_MAX || v < INT64_MIN) {
    if constexpr (std::is_invocable_v<const What&>) invalid(what() + " does not fit in 64 bits");
    else invalid(std::string(what) + " does not fit in 64 bits");
  }
  return static_cast<std::int64_t>(v);
}

// A unit's traits from its functions for parameters P: Infer(const P&, inputs, facts, full),
// ToJson(const P&) and FromJson(const json&) -> P (nullptr: never in a plan).
// The unit's LayerType is P's index among LayerParams' alternatives (tensoracle/network.h).
template <typename P, std::size_t I = 0>
constexpr LayerType layer_type_of() {
  static_assert(I < std::variant_size_v<LayerParams>, "an op unit's parameters must be one of LayerParams' alternatives");
  if constexpr (std::is_same_v<std::variant_alternative_t<I, LayerParams>, P>) return static_cast<LayerType>(I);
  else return layer_type_of<P, I + 1>();
}

template <typename P, auto Infer, auto ToJson, auto FromJson>
constexpr OpTraits make_op(std::string_view name, InputArity arity, std::span<const std::string_view> float_keys = {}) {
  OpTraits t{layer_type_of<P>(), name, arity, nullptr, nullptr, nullptr, float_keys};
  t.infer = [](const LayerParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
    return Infer(std::get<P>(p), in, facts, full);
  };
  t.to_json = [](const LayerParams& p) -> json { return ToJson(std::get<P>(p)); };
  if constexpr (!std::is_null_pointer_v<decltype(FromJson)>)
    t.from_json = [](const json& j) -> LayerParams { return FromJson(j); };
  return t;
}

}  // namespace tensoracle::graph::ops
