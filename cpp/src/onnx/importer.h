// Internal: the ONNX importer's state and the helpers every operator's converter uses.
//
// The parser (parser.cpp) reads the ModelProto, creates the network's inputs and the
// initializers' constants, then calls one converter per node (ops_*.cpp, listed in
// op_table.cpp). A converter reads its node through a NodeContext (inputs as network tensors,
// attributes with ONNX's defaults, the values of inputs known at parse time), adds layers, and
// binds the node's outputs. It reports what it cannot convert by throwing NodeError with
// TensorRT's error code; the parser adds the node's index, name, operator and opset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "onnx/onnx_schema.pb.h"
#include "tensoracle/network.h"
#include "tensoracle/onnx_parser.h"

namespace tensoracle::onnx {

namespace pb = ::tensoracle_onnx;

// What a converter throws.
struct NodeError : std::runtime_error {
  NodeError(OnnxErrorCode c, const std::string& what) : std::runtime_error(what), code(c) {}
  OnnxErrorCode code;
};
[[noreturn]] void fail(OnnxErrorCode code, const std::string& what);

// Integer arithmetic on a model's values (attributes, shapes, initializers), which may be
// hostile: a result that does not fit 64 bits is a NodeError (kINVALID_NODE) naming `what`.
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what);
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what);

// Dims of the values in `v`; more than Dims::kMaxRank of them is a NodeError.
Dims dims_of(const std::vector<std::int64_t>& v);

// ONNX's TensorProto.DataType as tensoracle's, or nullopt (double, int16, strings, ...).
std::optional<DataType> data_type_of(std::int32_t onnx_type) noexcept;
std::string onnx_type_name(std::int32_t onnx_type);

// A value known while parsing: its weights (row-major, `dims`).
struct Known {
  Weights weights;
  Dims dims;
  std::vector<std::int64_t> ints() const;    // int32/int64/bool/uint8/int8 elements widened
  std::vector<double> floats() const;        // any element type as double
};

class Importer {
 public:
  Importer(Network& net, int opset, std::shared_ptr<const void> owner) : net_(net), opset_(opset), owner_(std::move(owner)) {}

  Network& net() { return net_; }
  int opset() const { return opset_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // ONNX tensor names -> network tensors.
  bool defined(const std::string& name) const { return tensors_.count(name) != 0; }
  Tensor* tensor(const std::string& name) const;  // throws NodeError (kINVALID_GRAPH) when undefined
  void bind(const std::string& name, Tensor* t);

  // The value of `t` when it is known at parse time: a constant's weights, a Shape of a tensor
  // whose dims are all known, or a layer whose inputs are all known, evaluated on the host with
  // the CPU backend's kernels (small results only). nullopt otherwise.
  std::optional<Known> value(Tensor* t);

  // The entries of a small 1-D (or 0-D) integer tensor as far as they are known while parsing:
  // a value, or "dimension `axis` of tensor `of`" (what Shape gives for a dim known only at run
  // time), or unknown. Exporters build reshape targets from such pieces (Concat of Gathers of a
  // Shape and constants); a reshape whose unknown entries are the input's own dims in place
  // becomes static (0 placeholders). nullopt when `t` is not such a tensor.
  struct SymDim {
    std::optional<std::int64_t> value;
    const Tensor* of = nullptr;
    int axis = -1;
  };
  std::optional<std::vector<SymDim>> symbolic(Tensor* t, int depth = 0);

  // Whether dim `a_axis` of `a` is, at run time, dim `b_axis` of `b`: the same tensor and axis,
  // or `b` computed from `a` by layers that carry that dim through in place (pointwise layers
  // whose other operand is 1 there, a matrix multiply's batch and row dims, normalizations,
  // softmax, reshapes that keep it). So an exported `view(batch, -1, heads, size)`, batch read
  // from the layer's input, becomes a static reshape of the projection's output.
  bool same_dim(const Tensor* a, int a_axis, const Tensor* b, int b_axis) const;

  // Refuses (kUNSUPPORTED_NODE_DYNAMIC) a shape-like tensor (`what`: "the shape") computed from
  // the values of a network input: tensoracle has no shape-tensor inputs, so reshape dims,
  // slice bounds and the like come from constants and tensors' shapes only.
  void require_shape_computable(Tensor* t, std::string_view what);

  // A constant layer's output for `w` of `dims`.
  Tensor* constant(const Dims& dims, Weights w);
  Tensor* constant_i64(const std::vector<std::int64_t>& v, const Dims& dims);
  Tensor* constant_i64(const std::vector<std::int64_t>& v) { return constant_i64(v, Dims{static_cast<std::int64_t>(v.size())}); }
  // A one-element constant of `type` holding `v`, of `rank` (all dims 1).
  Tensor* scalar(DataType type, double v, int rank);

  // Shared layer recipes.
  Tensor* reshape(Tensor* x, const Dims& dims, bool zero_is_placeholder = false);
  Tensor* transpose(Tensor* x, const std::vector<int>& perm);
  // x with `n` leading dims of 1 (numpy broadcasting's rank alignment).
  Tensor* prepend_ones(Tensor* x, int n);
  // a and b at a common rank (numpy broadcasting), in place.
  void align_ranks(Tensor*& a, Tensor*& b);
  Tensor* elementwise(Tensor* a, Tensor* b, ElementWiseOperation op);  // aligns ranks first
  Tensor* unary(Tensor* x, UnaryOperation op);
  Tensor* activation(Tensor* x, ActivationType type, float alpha = 0.f, float beta = 0.f);
  Tensor* cast(Tensor* x, DataType to);
  Tensor* identity(Tensor* x);
  // x broadcast to `dims` (each of x's dims 1 or equal; same rank) by a slice in WRAP mode.
  Tensor* broadcast_to(Tensor* x, const Dims& dims);
  // The same to a shape given as a 1-D int64 tensor known only at run time.
  Tensor* broadcast_to(Tensor* x, Tensor* shape);

 private:
  std::optional<Known> evaluate(Layer& layer, int depth);
  std::optional<Known> value(Tensor* t, int depth);

  Network& net_;
  int opset_;
  std::shared_ptr<const void> owner_;
  std::unordered_map<std::string, Tensor*> tensors_;
  std::unordered_map<const Tensor*, Known> known_;
};

// A node being converted.
class NodeContext {
 public:
  NodeContext(Importer& im, const pb::NodeProto& node) : im_(im), node_(node) {}

  Importer& im() { return im_; }
  Network& net() { return im_.net(); }
  const pb::NodeProto& node() const { return node_; }
  int opset() const { return im_.opset(); }

  // Inputs: ONNX leaves optional inputs out by an empty name, or by a shorter list.
  int num_inputs() const { return node_.input_size(); }
  bool has_input(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  Tensor* input(int i) const;  // throws NodeError naming the missing input
  std::optional<Known> input_value(int i) const;
  // The values of input i, which must be known at parse time (else kUNSUPPORTED_NODE_DYNAMIC
  // naming `what`).
  Known known_input(int i, std::string_view what) const;
  std::vector<std::int64_t> input_ints(int i, std::string_view what) const { return known_input(i, what).ints(); }

  int num_outputs() const { return node_.output_size(); }
  bool wants_output(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }
  void output(int i, Tensor* t);

  // Attributes, with the default when absent. A present attribute of another type is a NodeError.
  bool has_attr(std::string_view name) const { return find_attr(name) != nullptr; }
  std::int64_t attr_int(std::string_view name, std::int64_t fallback) const;
  float attr_float(std::string_view name, float fallback) const;
  std::string attr_string(std::string_view name, std::string fallback) const;
  std::vector<std::int64_t> attr_ints(std::string_view name, std::vector<std::int64_t> fallback = {}) const;
  std::vector<float> attr_floats(std::string_view name, std::vector<float> fallback = {}) const;
  const pb::TensorProto* attr_tensor(std::string_view name) const;
  const pb::AttributeProto* find_attr(std::string_view name) const;
  // Refuses (kUNSUPPORTED_NODE_ATTR) an attribute whose value differs from what tensoracle does.
  void require_attr_int(std::string_view name, std::int64_t expected, std::int64_t fallback, std::string_view why) const;

  // Axis `a` of a tensor of `rank` made non-negative (ONNX's negative axes); NodeError when out
  // of range.
  int axis(std::int64_t a, int rank, std::string_view what = "axis") const;
  std::uint32_t axes_mask(const std::vector<std::int64_t>& axes, int rank) const;

 private:
  Importer& im_;
  const pb::NodeProto& node_;
};

// The weights of an initializer or a Constant's tensor attribute. `folder` resolves external
// data (empty: refused). Throws NodeError (kINVALID_VALUE, kUNSUPPORTED_NODE_DATATYPE).
Known read_tensor(const pb::TensorProto& t, const std::shared_ptr<const void>& owner, const std::string& folder);

// The file an external-data tensor's `location` names in `folder` (resolved; never outside it).
std::filesystem::path external_data_path(const pb::TensorProto& t, const std::string& folder);

using Converter = std::function<void(NodeContext&)>;
// The converter of `op_type` (default domain), or null.
const Converter* find_converter(std::string_view op_type);
std::vector<std::string> converter_names();

// Registration from the ops_*.cpp files (op_table.cpp calls each).
using ConverterTable = std::map<std::string, Converter, std::less<>>;
void add_math_ops(ConverterTable& t);
void add_tensor_ops(ConverterTable& t);
void add_nn_ops(ConverterTable& t);
void add_control_ops(ConverterTable& t);

}  // namespace tensoracle::onnx
