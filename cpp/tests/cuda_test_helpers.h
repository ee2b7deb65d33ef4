// Test helpers shared by the CUDA backend's tests (test_cuda_*.cpp, label gpu): float16 and
// bfloat16 data, and engines of a graph whose one input "x" is fixed, built and run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/numeric.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"

namespace tensoracle::testing {

// float16 or bfloat16 bits (t) of each value, rounded to nearest even.
inline std::vector<std::uint16_t> to_16bit(DataType t, const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = t == DataType::kHALF ? core::float_to_half(v[i]) : core::float_to_bf16(v[i]);
  return h;
}

// An engine of `graph`, whose one input "x" is fixed at `dims`, built for `device` at `level`.
template <class Graph>
std::vector<std::byte> fixed_engine(const Graph& graph, const Dims& dims, const char* device, int level) {
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed(dims);
  d.settings.device = device;
  d.settings.optimization_level = level;
  return build_serialized_engine(graph, d);
}

// Output "y" of the engine run on x (float16 or bfloat16 bits, t), as floats.
inline std::vector<float> output_y(const std::vector<std::byte>& bytes, DataType t, const Dims& dims, const std::uint16_t* x) {
  auto r = Engine::deserialize(bytes).create_execution().run({{"x", {t, dims, x}}});
  const auto* h = reinterpret_cast<const std::uint16_t*>(r.at("y").data.get());
  std::vector<float> v(static_cast<std::size_t>(r.at("y").dims.volume()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t == DataType::kHALF ? core::half_to_float(h[i]) : core::bf16_to_float(h[i]);
  return v;
}

}  // namespace tensoracle::testing
