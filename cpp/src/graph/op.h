// Internal: what the core knows of one layer kind, apart from how a backend runs it. Each kind
// has one op unit, graph/ops/<layer>.cpp, that defines its traits: its name in plans and
// messages, how many inputs it takes, its validation and shape inference, and its parameters'
// JSON form in an engine's plan. graph/ops/registry.cpp lists them all, in LayerType order.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

#include "graph/ops.h"

namespace tensoracle::graph {

struct OpTraits {
  LayerType type;
  std::string_view name;  // "matrix_multiply": the plan's "layer" field, layer_type_name()
  InputArity arity;       // graph::infer refuses other counts before `infer` runs
  // Output descriptions for `params` (of this kind) applied to `inputs`; see graph::infer.
  std::vector<TensorDesc> (*infer)(const LayerParams& params, std::span<const TensorDesc> inputs,
                                   std::span<const InputFacts> facts, bool full);
  // The parameters' JSON object in a plan, and back. from_json reads untrusted JSON: it throws
  // CorruptEngineError (or nlohmann::json's exceptions, which the plan reader reports as
  // corrupt) on anything it does not know. Null for kinds that are never plan nodes (input,
  // constant).
  nlohmann::json (*to_json)(const LayerParams& params);
  LayerParams (*from_json)(const nlohmann::json& params);
  // The keys of the parameters' JSON whose values may be fractions: the plan reader refuses a
  // fraction under any other key (nlohmann casts a float to an integer type: undefined
  // behaviour out of range) and a float beyond float32's range under these.
  std::span<const std::string_view> float_keys = {};
};

// The traits of a layer kind; `type` must be a LayerType (every LayerParams index is).
const OpTraits& op_traits(LayerType type);
// The traits of the kind named `name` in a plan, or null.
const OpTraits* find_op(std::string_view name);
// Whether some kind's parameters have a float under `key` (OpTraits::float_keys).
bool is_float_key(std::string_view key);

}  // namespace tensoracle::graph
