// Internal: the JSON forms of the graph's values, shared by the op units' parameters and the
// engine's plan: enum values by TensorRT's names, data types, dims. Readers take untrusted
// JSON and throw CorruptEngineError for what they do not know.
#pragma once

#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/errors.h"
#include "tensoracle/types.h"

namespace tensoracle::graph {

using json = nlohmann::json;

template <typename E, std::size_t N>
std::string enum_name(const std::array<std::string_view, N>& names, E v) {
  auto i = static_cast<std::size_t>(v);
  return i < N ? std::string(names[i]) : std::to_string(i);
}

template <typename E, std::size_t N>
E enum_value(const std::array<std::string_view, N>& names, const std::string& s) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  throw CorruptEngineError("[engine] unknown enum value '" + s + "' in the plan");
}

inline DataType type_of(const json& j) {
  auto t = parse_type(j.get<std::string>());
  if (!t) throw CorruptEngineError("[engine] unknown data type '" + j.get<std::string>() + "' in the plan");
  return *t;
}

inline json dims_json(const Dims& d) { return d.vec(); }
inline Dims dims_of(const json& j) { return Dims(std::span<const std::int64_t>(j.get<std::vector<std::int64_t>>())); }

}  // namespace tensoracle::graph
