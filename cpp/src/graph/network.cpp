#include "tensoracle/network.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "core/numeric.h"
#include "graph/ops.h"
#include "plugin/registry.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace {
// The producer of a network input (not exposed: TensorRT has no such layer object).
class InputLayer : public Layer {};
}  // namespace

// layer_type_name: graph/ops/registry.cpp (the op units' names).

// ---- Tensor -----------------------------------------------------------------------------

void Tensor::set_name(std::string name) {
  if (name.empty()) throw InvalidArgument("[network] tensor '" + name_ + "': a tensor name cannot be empty");
  name_ = std::move(name);
}

bool Tensor::is_network_input() const noexcept {
  return producer_ != nullptr && producer_->type() == LayerType::kINPUT;
}

void Tensor::set_dims(const Dims& dims) {
  if (!is_network_input())
    throw InvalidArgument("[network] tensor '" + name_ + "': only network inputs can be given new dims");
  for (auto d : dims)
    if (d < -1) throw InvalidArgument("[network] input '" + name_ + "': dims " + dims.str() + " hold " + std::to_string(d));
  dims_ = dims;
  net_->reinfer_after(*producer_);
}

// ---- Layer ------------------------------------------------------------------------------

void Layer::set_name(std::string name) {
  if (name.empty()) throw InvalidArgument("[network] layer '" + name_ + "': a layer name cannot be empty");
  name_ = std::move(name);
}

Tensor* Layer::get_input(int i) const {
  if (const auto* s = std::get_if<SliceParams>(&params_); s && i >= 1 && i <= 5) {  // TensorRT's numbering
    int pos = slice_input_position(*s, i);
    return pos < 0 ? nullptr : inputs_[static_cast<std::size_t>(pos)];
  }
  if (i < 0 || i >= num_inputs())
    throw InvalidArgument("[network] layer '" + name_ + "': no input " + std::to_string(i) + " (it has " +
                          std::to_string(num_inputs()) + ")");
  return inputs_[static_cast<std::size_t>(i)];
}

Tensor* Layer::get_output(int i) const {
  if (i < 0 || i >= num_outputs())
    throw InvalidArgument("[network] layer '" + name_ + "': no output " + std::to_string(i) + " (it has " +
                          std::to_string(num_outputs()) + ")");
  return outputs_[static_cast<std::size_t>(i)];
}

void Layer::update(LayerParams p) {
  // A layer waiting for its settings (added with add_layer's defer_errors) takes any step
  // towards them: what still does not fit stays its error, reported by the build.
  std::string& waiting = net_->invalid_[static_cast<std::size_t>(net_->position(this))];
  try {
    net_->infer(*this, p);  // throws, leaving the layer unchanged
  } catch (const InvalidArgument& e) {
    if (waiting.empty()) throw;
    params_ = std::move(p);
    waiting = e.what();
    return;
  }
  params_ = std::move(p);
  net_->reinfer_after(*this);
}

MatrixOperation MatrixMultiplyLayer::get_operation(int index) const {
  const auto& p = std::get<MatrixMultiplyParams>(params());
  if (index != 0 && index != 1)
    throw InvalidArgument("[network] layer '" + name() + "': operation index " + std::to_string(index) + " is not 0 or 1");
  return index == 0 ? p.op0 : p.op1;
}

void MatrixMultiplyLayer::set_operation(int index, MatrixOperation op) {
  auto p = std::get<MatrixMultiplyParams>(params());
  if (index != 0 && index != 1)
    throw InvalidArgument("[network] layer '" + name() + "': operation index " + std::to_string(index) + " is not 0 or 1");
  (index == 0 ? p.op0 : p.op1) = op;
  update(p);
}

void ElementWiseLayer::set_operation(ElementWiseOperation op) { update(ElementWiseParams{op}); }

void ActivationLayer::set_activation_type(ActivationType t) {
  auto p = std::get<ActivationParams>(params());
  p.type = t;
  update(p);
}
void ActivationLayer::set_alpha(float a) {
  auto p = std::get<ActivationParams>(params());
  p.alpha = a;
  update(p);
}
void ActivationLayer::set_beta(float b) {
  auto p = std::get<ActivationParams>(params());
  p.beta = b;
  update(p);
}

void CastLayer::set_to_type(DataType t) { update(CastParams{t}); }

void QuantizeLayer::set_to_type(DataType t) {
  auto p = std::get<QuantizeParams>(params());
  p.to = t;
  update(p);
}
void QuantizeLayer::set_axis(std::int32_t axis) {
  auto p = std::get<QuantizeParams>(params());
  p.axis = axis;
  update(p);
}
void DequantizeLayer::set_to_type(DataType t) {
  auto p = std::get<DequantizeParams>(params());
  p.to = t;
  update(p);
}
void DequantizeLayer::set_axis(std::int32_t axis) {
  auto p = std::get<DequantizeParams>(params());
  p.axis = axis;
  update(p);
}

void ShuffleLayer::set_first_transpose(const Permutation& perm) {
  auto p = shuffle();
  p.first_transpose = perm;
  update(p);
}
void ShuffleLayer::set_reshape_dims(const Dims& d) {
  auto p = shuffle();
  p.reshape_dims = d;
  update(p);
}
void ShuffleLayer::set_second_transpose(const Permutation& perm) {
  auto p = shuffle();
  p.second_transpose = perm;
  update(p);
}
void ShuffleLayer::set_zero_is_placeholder(bool z) {
  auto p = shuffle();
  p.zero_is_placeholder = z;
  update(p);
}

// ---- Network ----------------------------------------------------------------------------

Network::Network() = default;
Network::~Network() = default;

std::string Network::unique_layer_name(LayerType type) {
  return std::string(layer_type_name(type)) + "_" + std::to_string(layers_.size());
}

void Network::check_tensor(const Tensor* t, const std::string& layer, int index) const {
  if (t == nullptr)
    throw InvalidArgument("[network] layer '" + layer + "': input " + std::to_string(index) + " is null");
  if (t->net_ != this)
    throw InvalidArgument("[network] layer '" + layer + "': input " + std::to_string(index) + " ('" + t->name() +
                          "') belongs to another network");
}

void Network::infer(Layer& layer, const LayerParams& params, bool full) const {
  std::vector<graph::TensorDesc> in;
  std::vector<graph::InputFacts> facts;
  for (Tensor* t : layer.inputs_) {
    in.push_back({t->type(), t->dims()});
    const bool constant = t->producer() != nullptr && t->producer()->type() == LayerType::kCONSTANT;
    facts.push_back({constant, constant ? graph::shape_values_of(std::get<ConstantParams>(t->producer()->params()).weights)
                                        : std::nullopt});
  }
  std::vector<graph::TensorDesc> out;
  try {
    out = graph::infer(params, in, facts, full);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("[network] layer '" + layer.name() + "' (" +
                          std::string(layer_type_name(static_cast<LayerType>(params.index()))) + "): " + e.what());
  }
  for (std::size_t i = 0; i < out.size() && i < layer.outputs_.size(); ++i) {
    layer.outputs_[i]->type_ = out[i].type;
    layer.outputs_[i]->dims_ = out[i].dims;
  }
}

template <typename L>
L* Network::add_layer(LayerType type, LayerParams params, std::vector<Tensor*> inputs, bool defer_errors) {
  auto layer = std::make_unique<L>();
  layer->net_ = this;
  layer->name_ = unique_layer_name(type);
  layer->params_ = std::move(params);
  for (std::size_t i = 0; i < inputs.size(); ++i) check_tensor(inputs[i], layer->name_, static_cast<int>(i));
  layer->inputs_ = std::move(inputs);
  auto out = std::unique_ptr<Tensor>(new Tensor(this, layer.get(), layer->name_ + "_output"));
  layer->outputs_.push_back(out.get());
  std::string error;
  try {
    infer(*layer, layer->params_);  // throws before anything is added
  } catch (const InvalidArgument& e) {
    if (!defer_errors) throw;
    error = e.what();
    Tensor* o = layer->outputs_[0];
    if (const auto* f = std::get_if<FillParams>(&layer->params_)) {
      o->type_ = f->to;
      o->dims_ = f->dims;
    } else if (!layer->inputs_.empty()) {
      o->type_ = layer->inputs_[0]->type();
      o->dims_ = layer->inputs_[0]->dims();
    }
  }
  tensors_.push_back(std::move(out));
  layers_.push_back(std::move(layer));
  invalid_.push_back(std::move(error));
  return static_cast<L*>(layers_.back().get());
}

Tensor* Network::add_input(std::string name, DataType type, const Dims& dims) {
  if (name.empty()) throw InvalidArgument("[network] add_input: the input name is empty");
  for (Tensor* t : inputs_)
    if (t->name() == name) throw InvalidArgument("[network] add_input: an input named '" + name + "' exists already");
  if (!is_valid(type)) throw InvalidArgument("[network] input '" + name + "': invalid data type");
  for (auto d : dims)
    if (d < -1) throw InvalidArgument("[network] input '" + name + "': dims " + dims.str() + " hold " + std::to_string(d));
  auto layer = std::make_unique<InputLayer>();
  layer->net_ = this;
  layer->name_ = name;
  layer->params_ = InputParams{};
  auto t = std::unique_ptr<Tensor>(new Tensor(this, layer.get(), name));
  t->type_ = type;
  t->dims_ = dims;
  layer->outputs_.push_back(t.get());
  inputs_.push_back(t.get());
  tensors_.push_back(std::move(t));
  layers_.push_back(std::move(layer));
  invalid_.emplace_back();
  return inputs_.back();
}

ConstantLayer* Network::add_constant(const Dims& shape, Weights weights) {
  return add_layer<ConstantLayer>(LayerType::kCONSTANT, ConstantParams{shape, std::move(weights)}, {});
}

MatrixMultiplyLayer* Network::add_matrix_multiply(Tensor* a, MatrixOperation op0, Tensor* b, MatrixOperation op1) {
  return add_layer<MatrixMultiplyLayer>(LayerType::kMATRIX_MULTIPLY, MatrixMultiplyParams{op0, op1}, {a, b});
}

ElementWiseLayer* Network::add_elementwise(Tensor* a, Tensor* b, ElementWiseOperation op) {
  return add_layer<ElementWiseLayer>(LayerType::kELEMENTWISE, ElementWiseParams{op}, {a, b});
}

ActivationLayer* Network::add_activation(Tensor* x, ActivationType type) {
  // TensorRT's defaults: LEAKY_RELU alpha 0.01; ELU alpha 1; SELU alpha/beta of the paper;
  // SOFTPLUS alpha 1 beta 1; CLIP [0, 0]; HARD_SIGMOID alpha 0.2 beta 0.5; SCALED_TANH 1, 1.
  ActivationParams p{type, 0.f, 0.f};
  switch (type) {
    case ActivationType::kLEAKY_RELU: p.alpha = 0.01f; break;
    case ActivationType::kELU: p.alpha = 1.f; break;
    case ActivationType::kSELU: p.alpha = 1.6732632423543772f; p.beta = 1.0507009873554805f; break;
    case ActivationType::kSOFTPLUS: case ActivationType::kSCALED_TANH: p.alpha = 1.f; p.beta = 1.f; break;
    case ActivationType::kHARD_SIGMOID: p.alpha = 0.2f; p.beta = 0.5f; break;
    default: break;
  }
  return add_layer<ActivationLayer>(LayerType::kACTIVATION, p, {x});
}

CastLayer* Network::add_cast(Tensor* x, DataType to) {
  return add_layer<CastLayer>(LayerType::kCAST, CastParams{to}, {x});
}

QuantizeLayer* Network::add_quantize(Tensor* x, Tensor* scale, DataType to) {
  return add_layer<QuantizeLayer>(LayerType::kQUANTIZE, QuantizeParams{to, 1}, {x, scale});
}

DequantizeLayer* Network::add_dequantize(Tensor* x, Tensor* scale, DataType to) {
  return add_layer<DequantizeLayer>(LayerType::kDEQUANTIZE, DequantizeParams{to, 1}, {x, scale});
}

ShuffleLayer* Network::add_shuffle(Tensor* x) {
  return add_layer<ShuffleLayer>(LayerType::kSHUFFLE, ShuffleParams{}, {x});
}

IdentityLayer* Network::add_identity(Tensor* x) {
  return add_layer<IdentityLayer>(LayerType::kIDENTITY, IdentityParams{}, {x});
}

UnaryLayer* Network::add_unary(Tensor* x, UnaryOperation op) {
  return add_layer<UnaryLayer>(LayerType::kUNARY, UnaryParams{op}, {x});
}

ReduceLayer* Network::add_reduce(Tensor* x, ReduceOperation op, std::uint32_t axes, bool keep_dims) {
  return add_layer<ReduceLayer>(LayerType::kREDUCE, ReduceParams{op, axes, keep_dims}, {x});
}

SoftMaxLayer* Network::add_softmax(Tensor* x) { return add_layer<SoftMaxLayer>(LayerType::kSOFTMAX, SoftmaxParams{}, {x}); }

ConcatenationLayer* Network::add_concatenation(const std::vector<Tensor*>& inputs) {
  if (inputs.empty()) throw InvalidArgument("[network] add_concatenation: no inputs");
  return add_layer<ConcatenationLayer>(LayerType::kCONCATENATION, ConcatenationParams{}, inputs);
}

SliceLayer* Network::add_slice(Tensor* x, const Dims& start, const Dims& size, const Dims& stride) {
  return add_layer<SliceLayer>(LayerType::kSLICE, SliceParams{start, size, stride, SampleMode::kSTRICT_BOUNDS}, {x});
}

GatherLayer* Network::add_gather(Tensor* data, Tensor* indices, std::int32_t axis) {
  return add_layer<GatherLayer>(LayerType::kGATHER, GatherParams{axis, GatherMode::kDEFAULT, 0}, {data, indices});
}

GatherLayer* Network::add_gather_v2(Tensor* data, Tensor* indices, GatherMode mode) {
  return add_layer<GatherLayer>(LayerType::kGATHER, GatherParams{0, mode, 0}, {data, indices});
}

TopKLayer* Network::add_topk(Tensor* x, TopKOperation op, std::int32_t k, std::uint32_t axes) {
  auto* layer = add_layer<TopKLayer>(LayerType::kTOPK, TopKParams{op, k, axes, -1}, {x});
  auto indices = std::unique_ptr<Tensor>(new Tensor(this, layer, layer->name() + "_output_1"));
  layer->outputs_.push_back(indices.get());
  tensors_.push_back(std::move(indices));
  infer(*layer, layer->params_);  // the same inputs and parameters: only sets output 1
  return layer;
}

PluginLayer* Network::add_plugin(const std::string& name, const std::string& version, const std::vector<Tensor*>& inputs,
                                 const std::vector<PluginField>& fields, const std::string& plugin_namespace) {
  const std::string layer_name = unique_layer_name(LayerType::kPLUGIN);
  for (std::size_t i = 0; i < inputs.size(); ++i) check_tensor(inputs[i], layer_name, static_cast<int>(i));
  PluginParams p{name, version, plugin_namespace, fields, -1, nullptr};
  try {
    p.plugin = plugin::create(layer_name, p);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("[network] layer '" + layer_name + "' (plugin): " + e.what());
  } catch (const PluginLibraryError& e) {
    throw PluginLibraryError("[network] layer '" + layer_name + "' (plugin): " + e.what());
  }
  const int outputs = p.plugin->num_outputs();
  auto* layer = add_layer<PluginLayer>(LayerType::kPLUGIN, std::move(p), inputs);
  for (int i = 1; i < outputs; ++i) {
    auto t = std::unique_ptr<Tensor>(new Tensor(this, layer, layer->name() + "_output_" + std::to_string(i)));
    layer->outputs_.push_back(t.get());
    tensors_.push_back(std::move(t));
  }
  if (outputs > 1) infer(*layer, layer->params_);  // the same plugin and inputs: sets the other outputs
  return layer;
}

ShapeLayer* Network::add_shape(Tensor* x) { return add_layer<ShapeLayer>(LayerType::kSHAPE, ShapeParams{}, {x}); }

SelectLayer* Network::add_select(Tensor* condition, Tensor* then_input, Tensor* else_input) {
  return add_layer<SelectLayer>(LayerType::kSELECT, SelectParams{}, {condition, then_input, else_input});
}

PaddingLayer* Network::add_padding_nd(Tensor* x, const Dims& pre, const Dims& post) {
  return add_layer<PaddingLayer>(LayerType::kPADDING, PaddingParams{pre, post}, {x});
}

int Network::position(const Layer* l) const {
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].get() == l) return static_cast<int>(i);
  return -1;
}

Tensor* Network::add_hidden_constant(const std::string& name, const Dims& shape, Weights w) {
  auto* c = add_constant(shape, std::move(w));
  c->set_name(name);
  c->get_output(0)->set_name(name);
  return c->get_output(0);
}

namespace {
Dims flat(std::int64_t n) { return Dims{n}; }
}  // namespace

ConvolutionLayer* Network::add_convolution_nd(Tensor* x, std::int32_t maps, const Dims& kernel_size, Weights kernel,
                                              Weights bias) {
  std::string name = unique_layer_name(LayerType::kCONVOLUTION);
  check_tensor(x, name, 0);
  std::vector<Tensor*> in{x, add_hidden_constant(name + ".kernel", flat(kernel.count()), std::move(kernel))};
  if (bias.count() > 0) in.push_back(add_hidden_constant(name + ".bias", flat(bias.count()), std::move(bias)));
  ConvolutionParams p;
  p.num_output_maps = maps;
  p.kernel_size = kernel_size;
  return add_layer<ConvolutionLayer>(LayerType::kCONVOLUTION, p, in);
}

DeconvolutionLayer* Network::add_deconvolution_nd(Tensor* x, std::int32_t maps, const Dims& kernel_size, Weights kernel,
                                                  Weights bias) {
  std::string name = unique_layer_name(LayerType::kDECONVOLUTION);
  check_tensor(x, name, 0);
  std::vector<Tensor*> in{x, add_hidden_constant(name + ".kernel", flat(kernel.count()), std::move(kernel))};
  if (bias.count() > 0) in.push_back(add_hidden_constant(name + ".bias", flat(bias.count()), std::move(bias)));
  DeconvolutionParams p;
  p.num_output_maps = maps;
  p.kernel_size = kernel_size;
  return add_layer<DeconvolutionLayer>(LayerType::kDECONVOLUTION, p, in);
}

namespace {

// Scale coefficients as float32 (TensorRT takes them in the input's type or float32); an
// empty Weights is `identity`, one coefficient.
Weights scale_coefficients(const Weights& w, float identity, const std::string& layer, const char* which) {
  std::vector<float> v;
  if (w.count() == 0) {
    v.push_back(identity);
  } else {
    v.resize(static_cast<std::size_t>(w.count()));
    for (std::int64_t i = 0; i < w.count(); ++i) {
      const auto u = static_cast<std::size_t>(i);
      switch (w.type()) {
        case DataType::kFLOAT: v[u] = static_cast<const float*>(w.values())[i]; break;
        case DataType::kHALF: v[u] = core::half_to_float(static_cast<const std::uint16_t*>(w.values())[i]); break;
        case DataType::kBF16: v[u] = core::bf16_to_float(static_cast<const std::uint16_t*>(w.values())[i]); break;
        default:
          throw InvalidArgument("[network] layer '" + layer + "': " + which + " weights have type " +
                                std::string(type_name(w.type())) + "; scale takes float32, float16 or bfloat16");
      }
    }
  }
  return Weights::copy_of(DataType::kFLOAT, v.data(), static_cast<std::int64_t>(v.size()));
}

// The value of a 0-D int32/int64 tensor a constant layer produces (a cumulative's axis, a
// one-hot's depth).
std::int64_t constant_scalar(const Tensor* t, const std::string& layer, const char* what) {
  if (t == nullptr) throw InvalidArgument("[network] layer '" + layer + "': " + what + " is null");
  const Layer* p = t->producer();
  if (p == nullptr || p->type() != LayerType::kCONSTANT || t->dims().rank() != 0)
    throw InvalidArgument("[network] layer '" + layer + "': " + what + " ('" + t->name() +
                          "') must be a 0-D int32 or int64 tensor made by a constant layer");
  const auto values = graph::shape_values_of(std::get<ConstantParams>(p->params()).weights);
  if (!values || values->size() != 1)
    throw InvalidArgument("[network] layer '" + layer + "': " + what + " ('" + t->name() +
                          "') must hold one int32 or int64 value");
  return values->front();
}

// The values of a 1-D int32/int64 tensor a constant layer produces (squeeze's axes, a fill's
// dims), as Dims.
Dims constant_vector(const Tensor* t, const std::string& layer, const char* what) {
  if (t == nullptr) throw InvalidArgument("[network] layer '" + layer + "': " + what + " is null");
  const Layer* p = t->producer();
  std::optional<std::vector<std::int64_t>> values;
  if (p != nullptr && p->type() == LayerType::kCONSTANT && t->dims().rank() == 1)
    values = graph::shape_values_of(std::get<ConstantParams>(p->params()).weights);
  if (!values)
    throw UnsupportedError("[network] layer '" + layer + "': " + what + " ('" + t->name() +
                           "') must be a 1-D int32 or int64 tensor made by a constant layer (tensors computed at run "
                           "time are not supported here)");
  if (values->size() > static_cast<std::size_t>(Dims::kMaxRank))
    throw InvalidArgument("[network] layer '" + layer + "': " + what + " ('" + t->name() + "') has " +
                          std::to_string(values->size()) + " values; at most " + std::to_string(Dims::kMaxRank));
  return Dims(std::span<const std::int64_t>(*values));
}

}  // namespace

ScaleLayer* Network::add_scale(Tensor* x, ScaleMode mode, Weights shift, Weights scale, Weights power) {
  check_tensor(x, unique_layer_name(LayerType::kSCALE), 0);
  return add_scale_nd(x, mode, std::move(shift), std::move(scale), std::move(power), std::max(0, x->dims().rank() - 3));
}

void Network::set_scale_coefficients(ScaleLayer* layer, int which, Weights w) {
  if (layer == nullptr || which < 0 || which > 2)
    throw InvalidArgument("[network] set_scale_coefficients: a scale layer and which 0 (shift), 1 (scale) or 2 (power)");
  const char* names[3] = {"shift", "scale", "power"};
  const Weights c = scale_coefficients(w, which == 0 ? 0.f : 1.f, layer->name(), names[which]);
  set_layer_input(layer, which + 1, add_hidden_constant(layer->name() + "." + names[which] + "_" + std::to_string(layers_.size()),
                                                        flat(c.count()), c));
}

ScaleLayer* Network::add_scale_nd(Tensor* x, ScaleMode mode, Weights shift, Weights scale, Weights power,
                                  std::int32_t channel_axis) {
  std::string name = unique_layer_name(LayerType::kSCALE);
  check_tensor(x, name, 0);
  Weights w[3] = {scale_coefficients(shift, 0.f, name, "shift"), scale_coefficients(scale, 1.f, name, "scale"),
                  scale_coefficients(power, 1.f, name, "power")};
  const char* suffix[3] = {".shift", ".scale", ".power"};
  std::vector<Tensor*> in{x};
  for (int i = 0; i < 3; ++i) in.push_back(add_hidden_constant(name + suffix[i], flat(w[i].count()), w[i]));
  return add_layer<ScaleLayer>(LayerType::kSCALE, ScaleParams{mode, channel_axis}, in);
}

ParametricReluLayer* Network::add_parametric_relu(Tensor* x, Tensor* slope) {
  return add_layer<ParametricReluLayer>(LayerType::kPARAMETRIC_RELU, ParametricReluParams{}, {x, slope});
}

LrnLayer* Network::add_lrn(Tensor* x, std::int32_t window, float alpha, float beta, float k) {
  return add_layer<LrnLayer>(LayerType::kLRN, LrnParams{window, alpha, beta, k}, {x});
}

CumulativeLayer* Network::add_cumulative(Tensor* x, Tensor* axis, CumulativeOperation op, bool exclusive, bool reverse) {
  const std::int64_t a = constant_scalar(axis, unique_layer_name(LayerType::kCUMULATIVE), "the axis (input 1)");
  if (a < -Dims::kMaxRank || a >= Dims::kMaxRank)
    throw InvalidArgument("[network] layer '" + unique_layer_name(LayerType::kCUMULATIVE) + "': axis " +
                          std::to_string(a) + " is out of range");
  CumulativeParams p{op, static_cast<std::int32_t>(a), exclusive, reverse};
  return add_layer<CumulativeLayer>(LayerType::kCUMULATIVE, p, {x});
}

ScatterLayer* Network::add_scatter(Tensor* data, Tensor* indices, Tensor* updates, ScatterMode mode) {
  return add_layer<ScatterLayer>(LayerType::kSCATTER, ScatterParams{mode, 0, ScatterReduction::kNONE}, {data, indices, updates});
}

OneHotLayer* Network::add_one_hot(Tensor* indices, Tensor* values, Tensor* depth, std::int32_t axis) {
  const std::string name = unique_layer_name(LayerType::kONE_HOT);
  const std::int64_t d = constant_scalar(depth, name, "depth (input 2)");
  return add_layer<OneHotLayer>(LayerType::kONE_HOT, OneHotParams{axis, d}, {indices, values});
}

PoolingLayer* Network::add_pooling_nd(Tensor* x, PoolingType type, const Dims& window) {
  PoolingParams p;
  p.type = type;
  p.window = window;
  return add_layer<PoolingLayer>(LayerType::kPOOLING, p, {x});
}

NormalizationLayer* Network::add_normalization(Tensor* x, Tensor* scale, Tensor* bias, std::uint32_t axes) {
  NormalizationParams p;
  p.axes = axes;
  return add_layer<NormalizationLayer>(LayerType::kNORMALIZATION, p, {x, scale, bias});
}

ResizeLayer* Network::add_resize(Tensor* x) {
  ResizeParams p;
  check_tensor(x, "add_resize", 0);
  p.output_dims = x->dims();  // TensorRT's default: the input's dims (set output dims or scales)
  return add_layer<ResizeLayer>(LayerType::kRESIZE, p, {x});
}

EinsumLayer* Network::add_einsum(const std::vector<Tensor*>& inputs, std::string equation) {
  return add_layer<EinsumLayer>(LayerType::kEINSUM, EinsumParams{std::move(equation)}, inputs);
}

SqueezeLayer* Network::add_squeeze(Tensor* x, Tensor* axes) {
  const Dims a = constant_vector(axes, unique_layer_name(LayerType::kSQUEEZE), "the axes (input 1)");
  return add_layer<SqueezeLayer>(LayerType::kSQUEEZE, SqueezeParams{a}, {x});
}

UnsqueezeLayer* Network::add_unsqueeze(Tensor* x, Tensor* axes) {
  const Dims a = constant_vector(axes, unique_layer_name(LayerType::kUNSQUEEZE), "the axes (input 1)");
  return add_layer<UnsqueezeLayer>(LayerType::kUNSQUEEZE, UnsqueezeParams{a}, {x});
}

ReverseSequenceLayer* Network::add_reverse_sequence(Tensor* x, Tensor* sequence_lens) {
  // Lengths that fit another batch axis than the default: TensorRT's programs set the axes
  // after adding the layer, so the layer waits for them (invalid until then).
  check_tensor(x, unique_layer_name(LayerType::kREVERSE_SEQUENCE), 0);
  check_tensor(sequence_lens, unique_layer_name(LayerType::kREVERSE_SEQUENCE), 1);
  const bool wait = x->dims().rank() >= 2 && sequence_lens->dims().rank() == 1 &&
                    (sequence_lens->type() == DataType::kINT32 || sequence_lens->type() == DataType::kINT64);
  return add_layer<ReverseSequenceLayer>(LayerType::kREVERSE_SEQUENCE, ReverseSequenceParams{}, {x, sequence_lens}, wait);
}

FillLayer* Network::add_fill(const Dims& dims, FillOperation op, DataType to) {
  FillParams p;
  p.op = op;
  p.dims = dims;
  p.to = to;
  // A linspace of rank 2 or more needs beta as a tensor, which TensorRT's programs set after
  // adding the layer (inputs 1 and 2): until then the layer is invalid, which the build reports.
  return add_layer<FillLayer>(LayerType::kFILL, p, {}, op == FillOperation::kLINSPACE && dims.rank() > 1);
}

// ---- Loops ------------------------------------------------------------------------------

namespace {
// The index of the loop or conditional a boundary layer's parameters name (-1: none).
std::int32_t boundary_index(const LayerParams& params) {
  std::int32_t index = -1;
  std::visit([&](const auto& p) {
    if constexpr (requires { p.loop; }) index = p.loop;
    else if constexpr (requires { p.conditional; }) index = p.conditional;
  }, params);
  return index;
}
}  // namespace

Loop* LoopBoundaryLayer::loop() const { return get_input(0)->network().get_loop(boundary_index(params())); }

void Loop::set_name(std::string name) {
  if (name.empty()) throw InvalidArgument("[network] loop '" + name_ + "': set_name with an empty name");
  name_ = std::move(name);
}

RecurrenceLayer* Loop::add_recurrence(Tensor* initial) {
  return net_->add_layer<RecurrenceLayer>(LayerType::kRECURRENCE, RecurrenceParams{index_}, {initial});
}

TripLimitLayer* Loop::add_trip_limit(Tensor* limit, TripLimit kind) {
  for (const auto& l : net_->layers_)
    if (const auto* t = std::get_if<TripLimitParams>(&l->params_); t && t->loop == index_ && t->kind == kind)
      throw InvalidArgument("[network] loop '" + name_ + "': it has a " + (kind == TripLimit::kCOUNT ? "COUNT" : "WHILE") +
                            " trip limit already ('" + l->name() + "')");
  auto* l = net_->add_layer<TripLimitLayer>(LayerType::kTRIP_LIMIT, TripLimitParams{index_, kind}, {limit});
  l->outputs_.clear();  // a trip limit has no output (as in TensorRT)
  return l;
}

IteratorLayer* Loop::add_iterator(Tensor* t, std::int32_t axis, bool reverse) {
  return net_->add_layer<IteratorLayer>(LayerType::kITERATOR, IteratorParams{index_, axis, reverse}, {t});
}

LoopOutputLayer* Loop::add_loop_output(Tensor* t, LoopOutput kind, std::int32_t axis) {
  // A CONCATENATE or REVERSE output waits for its length, which programs set next (input 1).
  return net_->add_layer<LoopOutputLayer>(LayerType::kLOOP_OUTPUT, LoopOutputParams{index_, kind, axis}, {t},
                                          kind != LoopOutput::kLAST_VALUE);
}

Loop* Network::add_loop() {
  const int index = num_loops();
  loops_.push_back(std::unique_ptr<Loop>(new Loop(this, index, "loop_" + std::to_string(index))));
  return loops_.back().get();
}

Loop* Network::get_loop(int i) const {
  if (i < 0 || i >= num_loops()) throw InvalidArgument("[network] no loop " + std::to_string(i));
  return loops_[static_cast<std::size_t>(i)].get();
}

// ---- Conditionals -----------------------------------------------------------------------

IfConditional* IfConditionalBoundaryLayer::conditional() const {
  return get_input(0)->network().get_conditional(boundary_index(params()));
}

void IfConditional::set_name(std::string name) {
  if (name.empty()) throw InvalidArgument("[network] conditional '" + name_ + "': set_name with an empty name");
  name_ = std::move(name);
}

ConditionLayer* IfConditional::set_condition(Tensor* condition) {
  for (const auto& l : net_->layers_)
    if (const auto* c = std::get_if<ConditionParams>(&l->params_); c && c->conditional == index_)
      throw InvalidArgument("[network] conditional '" + name_ + "': its condition is set already ('" + l->name() + "')");
  auto* l = net_->add_layer<ConditionLayer>(LayerType::kCONDITION, ConditionParams{index_}, {condition});
  l->outputs_.clear();  // a condition has no output (as in TensorRT)
  return l;
}

IfConditionalInputLayer* IfConditional::add_input(Tensor* t) {
  return net_->add_layer<IfConditionalInputLayer>(LayerType::kCONDITIONAL_INPUT, ConditionalInputParams{index_}, {t});
}

IfConditionalOutputLayer* IfConditional::add_output(Tensor* true_value, Tensor* false_value) {
  return net_->add_layer<IfConditionalOutputLayer>(LayerType::kCONDITIONAL_OUTPUT, ConditionalOutputParams{index_},
                                                   {true_value, false_value});
}

IfConditional* Network::add_if_conditional() {
  const int index = num_conditionals();
  conditionals_.push_back(std::unique_ptr<IfConditional>(new IfConditional(this, index, "conditional_" + std::to_string(index))));
  return conditionals_.back().get();
}

IfConditional* Network::get_conditional(int i) const {
  if (i < 0 || i >= num_conditionals()) throw InvalidArgument("[network] no conditional " + std::to_string(i));
  return conditionals_[static_cast<std::size_t>(i)].get();
}

AttentionLayer* Network::add_attention(Tensor* query, Tensor* key, Tensor* value, AttentionNormalizationOp op, bool causal) {
  AttentionParams p;
  p.normalization = op;
  p.causal = causal;
  return add_layer<AttentionLayer>(LayerType::kATTENTION, p, {query, key, value});
}

void Network::set_layer_input(Layer* layer, int index, Tensor* t) {
  if (layer == nullptr || layer->net_ != this) throw InvalidArgument("[network] set_input: the layer is not in this network");
  check_tensor(t, layer->name(), index);
  // Inputs TensorRT takes as tensors that are parameters here: read from their constants.
  const LayerType type = layer->type();
  if ((type == LayerType::kSQUEEZE || type == LayerType::kUNSQUEEZE || type == LayerType::kFILL) &&
      index == (type == LayerType::kFILL ? 0 : 1)) {
    const Dims values = constant_vector(t, layer->name(), type == LayerType::kFILL ? "the dims (input 0)" : "the axes (input 1)");
    LayerParams p = layer->params_;
    if (auto* s = std::get_if<SqueezeParams>(&p)) s->axes = values;
    if (auto* u = std::get_if<UnsqueezeParams>(&p)) u->axes = values;
    auto* f = std::get_if<FillParams>(&p);
    if (f == nullptr) {
      layer->update(p);
      return;
    }
    f->dims = values;
    try {
      layer->update(p);
    } catch (const InvalidArgument& e) {
      // A fill's new dims may need its alpha and beta tensors (a rank-2 linspace), which
      // TensorRT's programs set next: the layer waits for them (the build reports it otherwise).
      layer->params_ = p;
      layer->outputs_[0]->type_ = f->to;
      layer->outputs_[0]->dims_ = f->dims;
      reinfer_after(*layer);  // (clears the layer's own error: set after)
      invalid_[static_cast<std::size_t>(position(layer))] = e.what();
    }
    return;
  }
  if (type == LayerType::kFILL) {
    // TensorRT's inputs 1 (alpha) and 2 (beta) are the node's 0 and 1. Alpha alone leaves the
    // layer invalid (reported by the build) until beta comes.
    if (index != 1 && index != 2)
      throw InvalidArgument("[network] layer '" + layer->name() + "': a fill takes inputs 0 (dims), 1 (alpha) and 2 (beta), "
                            "not " + std::to_string(index));
    if (index == 2 && layer->num_inputs() == 0)
      throw InvalidArgument("[network] layer '" + layer->name() + "': set alpha (input 1) before beta (input 2)");
    if (position(t->producer()) > position(layer)) move_after_producer(*layer, *t);
    const auto saved = layer->inputs_;
    const auto at = static_cast<std::size_t>(index - 1);
    if (at < layer->inputs_.size()) layer->inputs_[at] = t;
    else layer->inputs_.push_back(t);
    std::string waiting;
    try {
      infer(*layer, layer->params_);
    } catch (const InvalidArgument& e) {
      if (layer->num_inputs() != 1) {
        layer->inputs_ = saved;
        throw;
      }
      waiting = e.what();
    }
    reinfer_after(*layer);  // (clears the layer's own error: set after)
    invalid_[static_cast<std::size_t>(position(layer))] = waiting;
    return;
  }
  if (type == LayerType::kRECURRENCE && index == 1) {
    // The loop's back edge: the next value is computed from the recurrence's own output, so the
    // layer keeps its place (the only input that may come from a later layer without moving it).
    const auto saved = layer->inputs_;
    if (layer->num_inputs() > 1) layer->inputs_[1] = t;
    else layer->inputs_.push_back(t);
    try {
      infer(*layer, layer->params_);
    } catch (...) {
      layer->inputs_ = saved;
      throw;
    }
    return;
  }
  const int last = type == LayerType::kSLICE ? 5 : layer->num_inputs();
  if (index < 0 || index > last)
    throw InvalidArgument("[network] layer '" + layer->name() + "': set_input index " + std::to_string(index) + " is out of range");
  if (position(t->producer()) > position(layer)) move_after_producer(*layer, *t);
  auto saved = layer->inputs_;
  auto saved_params = layer->params_;
  if (auto* out = std::get_if<LoopOutputParams>(&layer->params_); out && index == 1 && out->kind == LoopOutput::kLAST_VALUE)
    out->kind = LoopOutput::kCONCATENATE;  // as TensorRT: a length makes a last-value output a concatenation
  if (auto* s = std::get_if<SliceParams>(&layer->params_); s && index >= 1) {
    // TensorRT's inputs 1..4 in any order; stored compactly in that order (see SliceParams).
    if (index == 5)
      throw UnsupportedError("[network] layer '" + layer->name() + "': slice input 5 (axes) is not supported; give start, size "
                             "and stride for every dimension");
    int pos = slice_input_position(*s, index);
    if (pos >= 0) {
      layer->inputs_[static_cast<std::size_t>(pos)] = t;
    } else {
      s->tensor_inputs = static_cast<std::uint8_t>(s->tensor_inputs | (1u << (index - 1)));
      pos = slice_input_position(*s, index);
      layer->inputs_.insert(layer->inputs_.begin() + pos, t);
    }
  } else if (index == layer->num_inputs()) {
    layer->inputs_.push_back(t);
  } else {
    layer->inputs_[static_cast<std::size_t>(index)] = t;
  }
  try {
    infer(*layer, layer->params_);
  } catch (...) {
    layer->inputs_ = saved;
    layer->params_ = saved_params;
    throw;
  }
  reinfer_after(*layer);
}

void Network::mark_output(Tensor* t) {
  check_tensor(t, "mark_output", 0);
  if (t->is_output_) return;
  t->is_output_ = true;
  outputs_.push_back(t);
}

void Network::unmark_output(Tensor* t) {
  check_tensor(t, "unmark_output", 0);
  if (!t->is_output_) throw InvalidArgument("[network] unmark_output: tensor '" + t->name() + "' is not an output");
  t->is_output_ = false;
  outputs_.erase(std::find(outputs_.begin(), outputs_.end(), t));
}

Layer* Network::get_layer(int i) const {
  if (i < 0 || i >= num_layers()) throw InvalidArgument("[network] no layer " + std::to_string(i));
  return layers_[static_cast<std::size_t>(i)].get();
}
Tensor* Network::get_input(int i) const {
  if (i < 0 || i >= num_inputs()) throw InvalidArgument("[network] no input " + std::to_string(i));
  return inputs_[static_cast<std::size_t>(i)];
}
Tensor* Network::get_output(int i) const {
  if (i < 0 || i >= num_outputs()) throw InvalidArgument("[network] no output " + std::to_string(i));
  return outputs_[static_cast<std::size_t>(i)];
}

// TensorRT takes a set_input tensor whatever its producer's place: the layer, and every layer
// between it and the producer that depends on it, move (in their order) to just after the
// producer, so that layers stay in an order where each comes after what it reads. Refused when
// the producer itself depends on the layer: the input would close a cycle.
void Network::move_after_producer(const Layer& layer, const Tensor& t) {
  const auto lp = static_cast<std::size_t>(position(&layer));
  const auto tp = static_cast<std::size_t>(position(t.producer()));
  std::vector<bool> moved(layers_.size(), false);
  moved[lp] = true;
  for (std::size_t i = lp + 1; i <= tp; ++i)
    for (const Tensor* in : layers_[i]->inputs_)
      if (in != nullptr && moved[static_cast<std::size_t>(position(in->producer()))]) {
        moved[i] = true;
        break;
      }
  if (moved[tp])
    throw InvalidArgument("[network] layer '" + layer.name() + "': input '" + t.name() + "' is computed from the layer's "
                          "own output; set_input would make a cycle");
  std::vector<std::unique_ptr<Layer>> kept, later;
  std::vector<std::string> kept_invalid, later_invalid;
  for (std::size_t i = lp; i <= tp; ++i) {
    (moved[i] ? later : kept).push_back(std::move(layers_[i]));
    (moved[i] ? later_invalid : kept_invalid).push_back(std::move(invalid_[i]));
  }
  std::size_t at = lp;
  for (std::size_t k = 0; k < kept.size(); ++k, ++at) {
    layers_[at] = std::move(kept[k]);
    invalid_[at] = std::move(kept_invalid[k]);
  }
  for (std::size_t k = 0; k < later.size(); ++k, ++at) {
    layers_[at] = std::move(later[k]);
    invalid_[at] = std::move(later_invalid[k]);
  }
}

void Network::reinfer_after(const Layer& changed) {
  bool after = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    if (&l == &changed) {
      after = true;
      invalid_[i].clear();
      continue;
    }
    if (!after || l.type() == LayerType::kINPUT) continue;
    try {
      infer(l, l.params_);
      invalid_[i].clear();
    } catch (const InvalidArgument& e) {
      invalid_[i] = e.what();  // reported by validate(), i.e. when the network is built
    }
  }
}

void Network::validate() const {
  for (const auto& msg : invalid_)
    if (!msg.empty()) throw InvalidArgument(msg);
  // The checks deferred while properties were being set (see graph::infer).
  for (const auto& l : layers_)
    if (l->type() != LayerType::kINPUT && l->type() != LayerType::kCONSTANT) infer(*l, l->params_, true);
  if (outputs_.empty()) throw InvalidArgument("[network] the network has no outputs (call mark_output)");
  std::unordered_set<std::string> names;
  for (Tensor* t : inputs_) names.insert(t->name());
  for (Tensor* t : outputs_) {
    if (t->is_network_input())
      throw InvalidArgument("[network] output '" + t->name() + "' is a network input; add an identity layer");
    if (!names.insert(t->name()).second)
      throw InvalidArgument("[network] output '" + t->name() + "': another input or output has this name");
  }
}

}  // namespace tensoracle
