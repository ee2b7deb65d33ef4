#include "graph/ops.h"

#include "graph/op.h"
#include "graph/ops/common.h"

namespace tensoracle::graph {

using ops::invalid;

InputArity input_arity(LayerType type) { return op_traits(type).arity; }

bool is_shape_tensor_type(DataType t) noexcept { return t == DataType::kINT32 || t == DataType::kINT64; }


std::optional<std::uint64_t> byte_size(DataType t, const Dims& d) noexcept {
  const std::int64_t n = d.volume();  // -1 for an unknown dim or an overflowing product
  std::uint64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(element_size(t)), &bytes))
    return std::nullopt;
  return bytes;
}

bool is_host_value_type(DataType t) noexcept { return is_shape_tensor_type(t) || t == DataType::kBOOL; }

std::optional<std::vector<std::int64_t>> shape_values_of(const Weights& w) {
  if (!is_host_value_type(w.type()) || w.count() > kMaxShapeTensorElements || w.values() == nullptr) return std::nullopt;
  std::vector<std::int64_t> v(static_cast<std::size_t>(w.count()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = w.type() == DataType::kINT32  ? static_cast<const std::int32_t*>(w.values())[i]
           : w.type() == DataType::kBOOL ? static_cast<const std::uint8_t*>(w.values())[i] != 0
                                         : static_cast<const std::int64_t*>(w.values())[i];
  return v;
}

std::vector<TensorDesc> infer(const LayerParams& params, std::span<const TensorDesc> in,
                              std::span<const InputFacts> facts, bool full) {
  // Every rule below indexes its inputs: the count comes first (an engine file's node may
  // name any number of inputs).
  const auto arity = input_arity(static_cast<LayerType>(params.index()));
  const auto count = static_cast<int>(in.size());
  if (count < arity.min || (arity.max >= 0 && count > arity.max))
    invalid("the layer has " + std::to_string(count) + " inputs; " +
            std::string(layer_type_name(static_cast<LayerType>(params.index()))) + " layers take " +
            (arity.min == arity.max ? std::to_string(arity.min)
                                    : std::to_string(arity.min) + (arity.max < 0 ? " or more" : " to " + std::to_string(arity.max))));
  if (facts.size() != in.size()) invalid("internal error: facts for " + std::to_string(facts.size()) + " of " + std::to_string(count) + " inputs");
  return op_traits(static_cast<LayerType>(params.index())).infer(params, in, facts, full);
}

}  // namespace tensoracle::graph
