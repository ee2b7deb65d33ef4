// Bindings of tensoracle/network.h with TensorRT's Python names (add_input, get_output(0),
// tensor.name, layer.reshape_dims, ...). Layers and tensors are owned by their Network; Python
// objects referring to them keep the Network's Python object alive (every binding that returns
// a layer or a tensor uses kRef), and that object owns the Network: one made in Python owns it
// outright, one lent to a graph function shares the builder's shared_ptr (network_for_graph).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

#include "arrays.h"
#include "bindings.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"

namespace nb = nanobind;

namespace tensoracle::python {

namespace {

constexpr auto kRef = nb::rv_policy::reference_internal;

Permutation perm_from(const std::vector<int>& v, const std::string& what) {
  if (v.size() > static_cast<std::size_t>(Dims::kMaxRank))
    throw InvalidArgument("[network] " + what + " has more than " + std::to_string(Dims::kMaxRank) + " entries");
  Permutation p;
  for (std::size_t i = 0; i < v.size(); ++i) p.order[i] = v[i];
  return p;
}

std::vector<int> perm_to(const Permutation& p) { return {p.order.begin(), p.order.end()}; }

// Weights borrowed from a NumPy array; the deleter releases the array with the GIL held.
Weights weights_from(nb::handle array, const std::string& what) {
  ArrayView v = array_view(array, what);
  auto* keep = v.array.release().ptr();
  std::shared_ptr<const void> owner(keep, [](const void* p) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
  });
  return Weights(v.type, v.data, v.dims.volume(), std::move(owner));
}

// A read-write property over one field of a ParamLayer's parameters (re-validated on set).
template <typename L, typename P, typename T>
void prop(nb::class_<L, Layer>& c, const char* name, T P::*field) {
  c.def_prop_rw(
      name, [field](const L& l) { return l.get().*field; },
      [field](L& l, const T& v) {
        P p = l.get();
        p.*field = v;
        l.set(p);
      });
}

// The same, for a field whose unset value stands for TensorRT's default: the getter returns
// the default itself (as TensorRT's getters do), computed from the layer by `fallback`.
template <typename L, typename P, typename T, typename F>
void prop_or_default(nb::class_<L, Layer>& c, const char* name, T P::*field, F fallback) {
  c.def_prop_rw(
      name, [field, fallback](const L& l) { return fallback(l, l.get().*field); },
      [field](L& l, const T& v) {
        P p = l.get();
        p.*field = v;
        l.set(p);
      });
}

// TensorRT's default axis of softmax and concatenation: rank - 3, or 0 below rank 3.
int default_axis_of(const Layer& l) {
  const Tensor* x = l.num_inputs() > 0 ? l.get_input(0) : nullptr;
  return x ? std::max(0, x->dims().rank() - 3) : 0;
}

// Window parameters left empty take TensorRT's defaults at the window's rank: `value` each.
Dims window_default(const Dims& d, const Dims& window, std::int64_t value) {
  if (d.rank() != 0) return d;
  std::vector<std::int64_t> v(static_cast<std::size_t>(window.rank()), value);
  return Dims(std::span<const std::int64_t>(v));
}

// The network's layers without the INPUT producers (TensorRT's view of a network's layers).
std::vector<Layer*> tensorrt_layers(const Network& n) {
  std::vector<Layer*> out;
  for (int i = 0; i < n.num_layers(); ++i)
    if (Layer* l = n.get_layer(i); l->type() != LayerType::kINPUT) out.push_back(l);
  return out;
}

Weights optional_weights(nb::handle h, const std::string& what) {
  if (h.is_none()) return Weights();
  if (nb::hasattr(h, "size") && nb::cast<std::int64_t>(h.attr("size")) == 0) return Weights();
  return weights_from(h, what);
}

}  // namespace

nb::object network_for_graph(Network& net) {
  // shared_from_this: the builder always owns the network it lends through a shared_ptr.
  return nb::cast(net.shared_from_this());
}

void bind_network(nb::module_& m) {
  nb::enum_<DataType>(m, "DataType", nb::is_arithmetic())
      .value("FLOAT", DataType::kFLOAT).value("HALF", DataType::kHALF).value("INT8", DataType::kINT8)
      .value("INT32", DataType::kINT32).value("BOOL", DataType::kBOOL).value("UINT8", DataType::kUINT8)
      .value("FP8", DataType::kFP8).value("BF16", DataType::kBF16).value("INT64", DataType::kINT64);
  nb::enum_<MatrixOperation>(m, "MatrixOperation", nb::is_arithmetic())
      .value("NONE", MatrixOperation::kNONE).value("TRANSPOSE", MatrixOperation::kTRANSPOSE)
      .value("VECTOR", MatrixOperation::kVECTOR);
  nb::enum_<ElementWiseOperation>(m, "ElementWiseOperation", nb::is_arithmetic())
      .value("SUM", ElementWiseOperation::kSUM).value("PROD", ElementWiseOperation::kPROD)
      .value("MAX", ElementWiseOperation::kMAX).value("MIN", ElementWiseOperation::kMIN)
      .value("SUB", ElementWiseOperation::kSUB).value("DIV", ElementWiseOperation::kDIV)
      .value("POW", ElementWiseOperation::kPOW).value("FLOOR_DIV", ElementWiseOperation::kFLOOR_DIV)
      .value("AND", ElementWiseOperation::kAND).value("OR", ElementWiseOperation::kOR)
      .value("XOR", ElementWiseOperation::kXOR).value("EQUAL", ElementWiseOperation::kEQUAL)
      .value("GREATER", ElementWiseOperation::kGREATER).value("LESS", ElementWiseOperation::kLESS);
  nb::enum_<ActivationType>(m, "ActivationType", nb::is_arithmetic())
      .value("RELU", ActivationType::kRELU).value("SIGMOID", ActivationType::kSIGMOID)
      .value("TANH", ActivationType::kTANH).value("LEAKY_RELU", ActivationType::kLEAKY_RELU)
      .value("ELU", ActivationType::kELU).value("SELU", ActivationType::kSELU)
      .value("SOFTSIGN", ActivationType::kSOFTSIGN).value("SOFTPLUS", ActivationType::kSOFTPLUS)
      .value("CLIP", ActivationType::kCLIP).value("HARD_SIGMOID", ActivationType::kHARD_SIGMOID)
      .value("SCALED_TANH", ActivationType::kSCALED_TANH).value("THRESHOLDED_RELU", ActivationType::kTHRESHOLDED_RELU)
      .value("GELU_ERF", ActivationType::kGELU_ERF).value("GELU_TANH", ActivationType::kGELU_TANH);
  nb::enum_<UnaryOperation>(m, "UnaryOperation", nb::is_arithmetic())
      .value("EXP", UnaryOperation::kEXP).value("LOG", UnaryOperation::kLOG).value("SQRT", UnaryOperation::kSQRT)
      .value("RECIP", UnaryOperation::kRECIP).value("ABS", UnaryOperation::kABS).value("NEG", UnaryOperation::kNEG)
      .value("SIN", UnaryOperation::kSIN).value("COS", UnaryOperation::kCOS).value("TAN", UnaryOperation::kTAN)
      .value("SINH", UnaryOperation::kSINH).value("COSH", UnaryOperation::kCOSH).value("ASIN", UnaryOperation::kASIN)
      .value("ACOS", UnaryOperation::kACOS).value("ATAN", UnaryOperation::kATAN).value("ASINH", UnaryOperation::kASINH)
      .value("ACOSH", UnaryOperation::kACOSH).value("ATANH", UnaryOperation::kATANH).value("CEIL", UnaryOperation::kCEIL)
      .value("FLOOR", UnaryOperation::kFLOOR).value("ERF", UnaryOperation::kERF).value("NOT", UnaryOperation::kNOT)
      .value("SIGN", UnaryOperation::kSIGN).value("ROUND", UnaryOperation::kROUND).value("ISINF", UnaryOperation::kISINF)
      .value("ISNAN", UnaryOperation::kISNAN);
  nb::enum_<ReduceOperation>(m, "ReduceOperation", nb::is_arithmetic())
      .value("SUM", ReduceOperation::kSUM).value("PROD", ReduceOperation::kPROD).value("MAX", ReduceOperation::kMAX)
      .value("MIN", ReduceOperation::kMIN).value("AVG", ReduceOperation::kAVG);
  nb::enum_<PoolingType>(m, "PoolingType", nb::is_arithmetic())
      .value("MAX", PoolingType::kMAX).value("AVERAGE", PoolingType::kAVERAGE)
      .value("MAX_AVERAGE_BLEND", PoolingType::kMAX_AVERAGE_BLEND);
  nb::enum_<PaddingMode>(m, "PaddingMode", nb::is_arithmetic())
      .value("EXPLICIT_ROUND_DOWN", PaddingMode::kEXPLICIT_ROUND_DOWN).value("EXPLICIT_ROUND_UP", PaddingMode::kEXPLICIT_ROUND_UP)
      .value("SAME_UPPER", PaddingMode::kSAME_UPPER).value("SAME_LOWER", PaddingMode::kSAME_LOWER);
  nb::enum_<GatherMode>(m, "GatherMode", nb::is_arithmetic())
      .value("DEFAULT", GatherMode::kDEFAULT).value("ELEMENT", GatherMode::kELEMENT).value("ND", GatherMode::kND);
  nb::enum_<SampleMode>(m, "SampleMode", nb::is_arithmetic())
      .value("STRICT_BOUNDS", SampleMode::kSTRICT_BOUNDS).value("DEFAULT", SampleMode::kSTRICT_BOUNDS)
      .value("WRAP", SampleMode::kWRAP).value("CLAMP", SampleMode::kCLAMP).value("FILL", SampleMode::kFILL)
      .value("REFLECT", SampleMode::kREFLECT);
  nb::enum_<InterpolationMode>(m, "InterpolationMode", nb::is_arithmetic())
      .value("NEAREST", InterpolationMode::kNEAREST).value("LINEAR", InterpolationMode::kLINEAR)
      .value("CUBIC", InterpolationMode::kCUBIC);
  nb::enum_<ResizeCoordinateTransformation>(m, "ResizeCoordinateTransformation", nb::is_arithmetic())
      .value("ALIGN_CORNERS", ResizeCoordinateTransformation::kALIGN_CORNERS)
      .value("ASYMMETRIC", ResizeCoordinateTransformation::kASYMMETRIC)
      .value("HALF_PIXEL", ResizeCoordinateTransformation::kHALF_PIXEL);
  nb::enum_<ResizeSelector>(m, "ResizeSelector", nb::is_arithmetic())
      .value("FORMULA", ResizeSelector::kFORMULA).value("UPPER", ResizeSelector::kUPPER);
  nb::enum_<ResizeRoundMode>(m, "ResizeRoundMode", nb::is_arithmetic())
      .value("HALF_UP", ResizeRoundMode::kHALF_UP).value("HALF_DOWN", ResizeRoundMode::kHALF_DOWN)
      .value("FLOOR", ResizeRoundMode::kFLOOR).value("CEIL", ResizeRoundMode::kCEIL);
  nb::enum_<TopKOperation>(m, "TopKOperation", nb::is_arithmetic()).value("MAX", TopKOperation::kMAX).value("MIN", TopKOperation::kMIN);
  nb::enum_<AttentionNormalizationOp>(m, "AttentionNormalizationOp", nb::is_arithmetic())
      .value("NONE", AttentionNormalizationOp::kNONE).value("SOFTMAX", AttentionNormalizationOp::kSOFTMAX);
  nb::enum_<LayerType>(m, "LayerType", nb::is_arithmetic())
      .value("INPUT", LayerType::kINPUT).value("CONSTANT", LayerType::kCONSTANT)
      .value("MATRIX_MULTIPLY", LayerType::kMATRIX_MULTIPLY).value("ELEMENTWISE", LayerType::kELEMENTWISE)
      .value("ACTIVATION", LayerType::kACTIVATION).value("CAST", LayerType::kCAST)
      .value("QUANTIZE", LayerType::kQUANTIZE).value("DEQUANTIZE", LayerType::kDEQUANTIZE)
      .value("SHUFFLE", LayerType::kSHUFFLE).value("IDENTITY", LayerType::kIDENTITY)
      .value("UNARY", LayerType::kUNARY).value("REDUCE", LayerType::kREDUCE).value("SOFTMAX", LayerType::kSOFTMAX)
      .value("CONCATENATION", LayerType::kCONCATENATION).value("SLICE", LayerType::kSLICE)
      .value("GATHER", LayerType::kGATHER).value("SELECT", LayerType::kSELECT).value("PADDING", LayerType::kPADDING)
      .value("CONVOLUTION", LayerType::kCONVOLUTION).value("DECONVOLUTION", LayerType::kDECONVOLUTION)
      .value("POOLING", LayerType::kPOOLING).value("NORMALIZATION", LayerType::kNORMALIZATION)
      .value("RESIZE", LayerType::kRESIZE).value("EINSUM", LayerType::kEINSUM).value("TOPK", LayerType::kTOPK).value("SHAPE", LayerType::kSHAPE)
      .value("PLUGIN", LayerType::kPLUGIN).value("ATTENTION", LayerType::kATTENTION).value("SCALE", LayerType::kSCALE)
      .value("PARAMETRIC_RELU", LayerType::kPARAMETRIC_RELU).value("LRN", LayerType::kLRN)
      .value("CUMULATIVE", LayerType::kCUMULATIVE).value("SCATTER", LayerType::kSCATTER).value("ONE_HOT", LayerType::kONE_HOT)
      .value("SQUEEZE", LayerType::kSQUEEZE).value("UNSQUEEZE", LayerType::kUNSQUEEZE)
      .value("REVERSE_SEQUENCE", LayerType::kREVERSE_SEQUENCE).value("FILL", LayerType::kFILL)
      .value("TRIP_LIMIT", LayerType::kTRIP_LIMIT).value("RECURRENCE", LayerType::kRECURRENCE)
      .value("ITERATOR", LayerType::kITERATOR).value("LOOP_OUTPUT", LayerType::kLOOP_OUTPUT)
      .value("CONDITION", LayerType::kCONDITION).value("CONDITIONAL_INPUT", LayerType::kCONDITIONAL_INPUT)
      .value("CONDITIONAL_OUTPUT", LayerType::kCONDITIONAL_OUTPUT);
  nb::enum_<TripLimit>(m, "TripLimit", nb::is_arithmetic()).value("COUNT", TripLimit::kCOUNT).value("WHILE", TripLimit::kWHILE);
  nb::enum_<LoopOutput>(m, "LoopOutput", nb::is_arithmetic())
      .value("LAST_VALUE", LoopOutput::kLAST_VALUE).value("CONCATENATE", LoopOutput::kCONCATENATE)
      .value("REVERSE", LoopOutput::kREVERSE);
  nb::enum_<ScaleMode>(m, "ScaleMode", nb::is_arithmetic())
      .value("UNIFORM", ScaleMode::kUNIFORM).value("CHANNEL", ScaleMode::kCHANNEL).value("ELEMENTWISE", ScaleMode::kELEMENTWISE);
  nb::enum_<ScatterMode>(m, "ScatterMode", nb::is_arithmetic()).value("ELEMENT", ScatterMode::kELEMENT).value("ND", ScatterMode::kND);
  nb::enum_<ScatterReduction>(m, "ScatterReduction", nb::is_arithmetic())
      .value("NONE", ScatterReduction::kNONE).value("SUM", ScatterReduction::kSUM).value("PROD", ScatterReduction::kPROD)
      .value("MAX", ScatterReduction::kMAX).value("MIN", ScatterReduction::kMIN);
  nb::enum_<CumulativeOperation>(m, "CumulativeOperation", nb::is_arithmetic()).value("SUM", CumulativeOperation::kSUM);
  nb::enum_<FillOperation>(m, "FillOperation", nb::is_arithmetic())
      .value("LINSPACE", FillOperation::kLINSPACE).value("RANDOM_UNIFORM", FillOperation::kRANDOM_UNIFORM)
      .value("RANDOM_NORMAL", FillOperation::kRANDOM_NORMAL);

  nb::class_<Tensor>(m, "ITensor", "A tensor of a Network (owned by it)")
      .def_prop_rw("name", &Tensor::name, &Tensor::set_name)
      .def_prop_ro("dtype", &Tensor::type)
      .def_prop_rw("shape", &Tensor::dims, &Tensor::set_dims)
      .def_prop_ro("is_network_input", &Tensor::is_network_input)
      .def_prop_ro("is_network_output", &Tensor::is_network_output)
      .def_prop_ro(
          "is_shape_tensor",
          [](const Tensor& t) {
            // Inputs never are (shape-tensor inputs are not supported); other tensors are when
            // shape inference evaluates their values on the host: a few int32/int64 values.
            const Dims& d = t.dims();
            return !t.is_network_input() && (t.type() == DataType::kINT32 || t.type() == DataType::kINT64) &&
                   d.rank() <= 1 && d.all_known() && d.volume() <= 64;
          },
          "Whether shape inference computes the tensor's values at build time (TensorRT's shape tensors)")
      .def_prop_ro("is_execution_tensor", [](const Tensor&) { return true; },
                   "True: every tensor is computed when the engine runs (where a layer reads it)")
      .def("__repr__", [](const Tensor& t) {
        return "ITensor('" + t.name() + "', " + std::string(type_name(t.type())) + ", " + t.dims().str() + ")";
      });

  nb::class_<Layer>(m, "ILayer", "A layer of a Network (owned by it)")
      .def_prop_rw("name", &Layer::name, &Layer::set_name)
      .def_prop_ro("type", &Layer::type)
      .def_prop_ro("num_inputs", &Layer::num_inputs)
      .def_prop_ro("num_outputs", &Layer::num_outputs)
      .def("get_input", &Layer::get_input, kRef)
      .def("get_output", &Layer::get_output, kRef)
      .def("set_input", [](Layer& l, int index, Tensor* t) { t->network().set_layer_input(&l, index, t); },
           nb::arg("index"), nb::arg("tensor"))
      // Precision: networks here are strongly typed (TensorRT's STRONGLY_TYPED): a layer computes
      // in the types its inputs give it. The getters say so; the setters refuse, as TensorRT does
      // on a strongly typed network, rather than be ignored.
      .def_prop_rw(
          "precision", [](const Layer& l) { return l.get_output(0)->type(); },
          [](Layer& l, DataType) {
            throw UnsupportedError("[network] layer '" + l.name() +
                                   "': setting a layer's precision is not supported: networks are strongly typed "
                                   "(a layer computes in its inputs' types); cast its inputs with add_cast instead");
          })
      .def_prop_ro("precision_is_set", [](const Layer&) { return false; })
      .def("reset_precision", [](Layer&) {})
      .def("get_output_type", [](const Layer& l, int index) { return l.get_output(index)->type(); }, nb::arg("index"))
      .def(
          "set_output_type",
          [](Layer& l, int index, DataType) {
            throw UnsupportedError("[network] layer '" + l.name() + "': set_output_type(" + std::to_string(index) +
                                   ", ...) is not supported: networks are strongly typed; add a cast layer after it");
          },
          nb::arg("index"), nb::arg("dtype"))
      .def("output_type_is_set", [](const Layer&, int) { return false; }, nb::arg("index"));
  nb::class_<ConstantLayer, Layer>(m, "IConstantLayer").def_prop_ro("shape", &ConstantLayer::shape);
  nb::class_<MatrixMultiplyLayer, Layer>(m, "IMatrixMultiplyLayer")
      .def_prop_rw("op0", [](const MatrixMultiplyLayer& l) { return l.get_operation(0); },
                   [](MatrixMultiplyLayer& l, MatrixOperation op) { l.set_operation(0, op); })
      .def_prop_rw("op1", [](const MatrixMultiplyLayer& l) { return l.get_operation(1); },
                   [](MatrixMultiplyLayer& l, MatrixOperation op) { l.set_operation(1, op); })
      .def("get_operation", &MatrixMultiplyLayer::get_operation)
      .def("set_operation", &MatrixMultiplyLayer::set_operation);
  nb::class_<ElementWiseLayer, Layer>(m, "IElementWiseLayer")
      .def_prop_rw("op", &ElementWiseLayer::operation, &ElementWiseLayer::set_operation);
  nb::class_<ActivationLayer, Layer>(m, "IActivationLayer")
      .def_prop_rw("type", &ActivationLayer::activation_type, &ActivationLayer::set_activation_type)
      .def_prop_rw("alpha", &ActivationLayer::alpha, &ActivationLayer::set_alpha)
      .def_prop_rw("beta", &ActivationLayer::beta, &ActivationLayer::set_beta);
  nb::class_<CastLayer, Layer>(m, "ICastLayer").def_prop_rw("to_type", &CastLayer::to_type, &CastLayer::set_to_type);
  nb::class_<QuantizeLayer, Layer>(m, "IQuantizeLayer")
      .def_prop_rw("to_type", &QuantizeLayer::to_type, &QuantizeLayer::set_to_type)
      .def_prop_rw("axis", &QuantizeLayer::axis, &QuantizeLayer::set_axis);
  nb::class_<DequantizeLayer, Layer>(m, "IDequantizeLayer")
      .def_prop_rw("to_type", &DequantizeLayer::to_type, &DequantizeLayer::set_to_type)
      .def_prop_rw("axis", &DequantizeLayer::axis, &DequantizeLayer::set_axis);
  nb::class_<ShuffleLayer, Layer>(m, "IShuffleLayer")
      .def_prop_rw("first_transpose", [](const ShuffleLayer& l) { return perm_to(l.shuffle().first_transpose); },
                   [](ShuffleLayer& l, const std::vector<int>& v) { l.set_first_transpose(perm_from(v, "first_transpose")); })
      .def_prop_rw("second_transpose", [](const ShuffleLayer& l) { return perm_to(l.shuffle().second_transpose); },
                   [](ShuffleLayer& l, const std::vector<int>& v) { l.set_second_transpose(perm_from(v, "second_transpose")); })
      .def_prop_rw("reshape_dims",
                   [](const ShuffleLayer& l) -> nb::object {
                     return l.shuffle().reshape_dims ? nb::cast(*l.shuffle().reshape_dims) : nb::none();
                   },
                   [](ShuffleLayer& l, const Dims& d) { l.set_reshape_dims(d); })
      .def_prop_rw("zero_is_placeholder", [](const ShuffleLayer& l) { return l.shuffle().zero_is_placeholder; },
                   &ShuffleLayer::set_zero_is_placeholder);
  nb::class_<IdentityLayer, Layer>(m, "IIdentityLayer");

  auto unary = nb::class_<UnaryLayer, Layer>(m, "IUnaryLayer");
  prop(unary, "op", &UnaryParams::op);
  auto reduce = nb::class_<ReduceLayer, Layer>(m, "IReduceLayer");
  prop(reduce, "op", &ReduceParams::op);
  prop(reduce, "axes", &ReduceParams::axes);
  prop(reduce, "keep_dims", &ReduceParams::keep_dims);
  auto softmax = nb::class_<SoftMaxLayer, Layer>(m, "ISoftMaxLayer");
  prop_or_default(softmax, "axes", &SoftmaxParams::axes, [](const SoftMaxLayer& l, std::uint32_t axes) {
    return axes != 0 ? axes : 1u << default_axis_of(l);
  });
  auto concat = nb::class_<ConcatenationLayer, Layer>(m, "IConcatenationLayer");
  prop_or_default(concat, "axis", &ConcatenationParams::axis, [](const ConcatenationLayer& l, std::int32_t axis) {
    return axis != -1000 ? axis : default_axis_of(l);
  });
  auto slice = nb::class_<SliceLayer, Layer>(m, "ISliceLayer");
  prop(slice, "start", &SliceParams::start);
  prop(slice, "shape", &SliceParams::size);
  prop(slice, "stride", &SliceParams::stride);
  prop(slice, "mode", &SliceParams::mode);
  auto gather = nb::class_<GatherLayer, Layer>(m, "IGatherLayer");
  prop(gather, "axis", &GatherParams::axis);
  prop(gather, "mode", &GatherParams::mode);
  prop(gather, "num_elementwise_dims", &GatherParams::num_elementwise_dims);
  nb::class_<SelectLayer, Layer>(m, "ISelectLayer");
  nb::class_<ShapeLayer, Layer>(m, "IShapeLayer");
  auto topk = nb::class_<TopKLayer, Layer>(m, "ITopKLayer");
  prop(topk, "op", &TopKParams::op);
  prop(topk, "k", &TopKParams::k);
  prop(topk, "axes", &TopKParams::axes);
  auto attention = nb::class_<AttentionLayer, Layer>(m, "IAttention");
  prop(attention, "norm_op", &AttentionParams::normalization);
  prop(attention, "causal", &AttentionParams::causal);
  prop(attention, "decomposable", &AttentionParams::decomposable);
  prop(attention, "scale", &AttentionParams::scale);
  attention.def_prop_rw(
      "mask", [](const AttentionLayer& l) { return l.mask(); },
      [](AttentionLayer& l, Tensor* t) { t->network().set_layer_input(&l, 3, t); }, kRef,
      "The optional mask (input 3): bool (true: attend) or the query's type (added to the scores)");
  auto scale = nb::class_<ScaleLayer, Layer>(m, "IScaleLayer");
  prop(scale, "mode", &ScaleParams::mode);
  prop(scale, "channel_axis", &ScaleParams::channel_axis);
  const char* const coefficient_names[3] = {"shift", "scale", "power"};
  for (int which = 0; which < 3; ++which)
    scale.def_prop_rw(
        coefficient_names[which],
        [which, coefficient_names](const ScaleLayer& l) {
          // The float32 coefficients of the constant input (one for the identity); a tensor set
          // with set_input has no weights to read.
          const Tensor* t = l.get_input(which + 1);
          const Layer* producer = t->producer();
          if (producer == nullptr || producer->type() != LayerType::kCONSTANT)
            throw InvalidArgument("[network] layer '" + l.name() + "': its " + coefficient_names[which] + " is tensor '" +
                                  t->name() + "', not weights");
          const auto& w = std::get<ConstantParams>(producer->params()).weights;
          const auto* v = static_cast<const float*>(w.values());
          return std::vector<float>(v, v + w.count());
        },
        [which](ScaleLayer& l, nb::handle w) {
          l.get_input(0)->network().set_scale_coefficients(&l, which, optional_weights(w, "scale coefficients"));
        },
        "coefficients (float32; set from an array, Weights or None: the identity)");
  nb::class_<ParametricReluLayer, Layer>(m, "IParametricReLULayer");
  auto lrn = nb::class_<LrnLayer, Layer>(m, "ILRNLayer");
  prop(lrn, "window_size", &LrnParams::window);
  prop(lrn, "alpha", &LrnParams::alpha);
  prop(lrn, "beta", &LrnParams::beta);
  prop(lrn, "k", &LrnParams::k);
  auto cumulative = nb::class_<CumulativeLayer, Layer>(m, "ICumulativeLayer");
  prop(cumulative, "op", &CumulativeParams::op);
  prop(cumulative, "exclusive", &CumulativeParams::exclusive);
  prop(cumulative, "reverse", &CumulativeParams::reverse);
  auto scatter = nb::class_<ScatterLayer, Layer>(m, "IScatterLayer");
  prop(scatter, "mode", &ScatterParams::mode);
  prop(scatter, "axis", &ScatterParams::axis);
  prop(scatter, "reduction", &ScatterParams::reduction);  // tensoracle's (TensorRT's scatter only replaces)
  auto one_hot = nb::class_<OneHotLayer, Layer>(m, "IOneHotLayer");
  prop(one_hot, "axis", &OneHotParams::axis);
  nb::class_<SqueezeLayer, Layer>(m, "ISqueezeLayer", "Removes dims of size 1; the axes are input 1 (a constant)");
  nb::class_<UnsqueezeLayer, Layer>(m, "IUnsqueezeLayer", "Inserts dims of size 1; the axes are input 1 (a constant)");
  auto reverse = nb::class_<ReverseSequenceLayer, Layer>(m, "IReverseSequenceLayer");
  prop(reverse, "batch_axis", &ReverseSequenceParams::batch_axis);
  prop(reverse, "sequence_axis", &ReverseSequenceParams::sequence_axis);
  auto fill = nb::class_<FillLayer, Layer>(m, "IFillLayer",
                                          "Makes a tensor from its parameters; set_input(0, dims constant), (1, alpha), (2, beta)");
  prop(fill, "shape", &FillParams::dims);
  prop(fill, "operation", &FillParams::op);
  prop(fill, "alpha", &FillParams::alpha);
  prop(fill, "beta", &FillParams::beta);
  prop(fill, "to_type", &FillParams::to);
  fill.def_prop_ro("is_alpha_beta_int64", [](const FillLayer&) { return false; },
                   "False: the layer's alpha and beta are doubles here (an integer fill takes its integers from them)");
  nb::class_<Loop>(m, "ILoop", "A loop of a Network (TensorRT's ILoop; unrolled when the engine is built)")
      .def_prop_rw("name", &Loop::name, &Loop::set_name)
      .def("add_recurrence", &Loop::add_recurrence, nb::arg("initial_value"), kRef)
      .def("add_trip_limit", &Loop::add_trip_limit, nb::arg("tensor"), nb::arg("kind"), kRef)
      .def("add_iterator", &Loop::add_iterator, nb::arg("tensor"), nb::arg("axis") = 0, nb::arg("reverse") = false, kRef)
      .def("add_loop_output", &Loop::add_loop_output, nb::arg("tensor"), nb::arg("kind"), nb::arg("axis") = 0, kRef);
  nb::class_<LoopBoundaryLayer, Layer>(m, "ILoopBoundaryLayer").def_prop_ro("loop", &LoopBoundaryLayer::loop, kRef);
  nb::class_<TripLimitLayer, LoopBoundaryLayer>(m, "ITripLimitLayer").def_prop_ro("kind", &TripLimitLayer::kind);
  nb::class_<RecurrenceLayer, LoopBoundaryLayer>(m, "IRecurrenceLayer");
  auto iterator = nb::class_<IteratorLayer, LoopBoundaryLayer>(m, "IIteratorLayer");
  iterator.def_prop_rw("axis", [](const IteratorLayer& l) { return l.get().axis; }, [](IteratorLayer& l, std::int32_t a) {
    IteratorParams p = l.get();
    p.axis = a;
    l.set(p);
  });
  iterator.def_prop_rw("reverse", [](const IteratorLayer& l) { return l.get().reverse; }, [](IteratorLayer& l, bool r) {
    IteratorParams p = l.get();
    p.reverse = r;
    l.set(p);
  });
  auto loop_output = nb::class_<LoopOutputLayer, LoopBoundaryLayer>(m, "ILoopOutputLayer");
  loop_output.def_prop_ro("kind", [](const LoopOutputLayer& l) { return l.get().kind; });
  loop_output.def_prop_rw("axis", [](const LoopOutputLayer& l) { return l.get().axis; }, [](LoopOutputLayer& l, std::int32_t a) {
    LoopOutputParams p = l.get();
    p.axis = a;
    l.set(p);
  });
  nb::class_<IfConditional>(m, "IIfConditional",
                            "A conditional of a Network (TensorRT's IIfConditional; both branches run, a select keeps one)")
      .def_prop_rw("name", &IfConditional::name, &IfConditional::set_name)
      .def("set_condition", &IfConditional::set_condition, nb::arg("condition"), kRef)
      .def("add_input", &IfConditional::add_input, nb::arg("input"), kRef)
      .def("add_output", &IfConditional::add_output, nb::arg("true_subgraph_output"), nb::arg("false_subgraph_output"), kRef);
  nb::class_<IfConditionalBoundaryLayer, Layer>(m, "IIfConditionalBoundaryLayer")
      .def_prop_ro("conditional", &IfConditionalBoundaryLayer::conditional, kRef);
  nb::class_<ConditionLayer, IfConditionalBoundaryLayer>(m, "IConditionLayer");
  nb::class_<IfConditionalInputLayer, IfConditionalBoundaryLayer>(m, "IIfConditionalInputLayer");
  nb::class_<IfConditionalOutputLayer, IfConditionalBoundaryLayer>(m, "IIfConditionalOutputLayer");
  auto padding = nb::class_<PaddingLayer, Layer>(m, "IPaddingLayer");
  prop(padding, "pre_padding_nd", &PaddingParams::pre_padding);
  prop(padding, "post_padding_nd", &PaddingParams::post_padding);
  auto conv = nb::class_<ConvolutionLayer, Layer>(m, "IConvolutionLayer");
  auto deconv = nb::class_<DeconvolutionLayer, Layer>(m, "IDeconvolutionLayer");
  auto windowed = [](auto& c, auto* tag) {
    using P = std::remove_pointer_t<decltype(tag)>;
    prop(c, "num_output_maps", &P::num_output_maps);
    prop(c, "kernel_size_nd", &P::kernel_size);
    using L0 = typename std::remove_reference_t<decltype(c)>::Type;
    auto ones = [](const L0& l, const Dims& d) { return window_default(d, l.get().kernel_size, 1); };
    auto zeros = [](const L0& l, const Dims& d) { return window_default(d, l.get().kernel_size, 0); };
    prop_or_default(c, "stride_nd", &P::stride, ones);
    prop_or_default(c, "pre_padding", &P::pre_padding, zeros);
    prop_or_default(c, "post_padding", &P::post_padding, zeros);
    prop_or_default(c, "dilation_nd", &P::dilation, ones);
    prop(c, "num_groups", &P::num_groups);
    prop(c, "padding_mode", &P::padding_mode);
    using L = typename std::remove_reference_t<decltype(c)>::Type;
    c.def_prop_rw("padding_nd", [](const L& l) { return window_default(l.get().pre_padding, l.get().kernel_size, 0); },
                  [](L& l, const Dims& d) {
      P p = l.get();
      p.pre_padding = d;
      p.post_padding = d;
      l.set(p);
    });
  };
  windowed(conv, static_cast<ConvolutionParams*>(nullptr));
  windowed(deconv, static_cast<DeconvolutionParams*>(nullptr));
  auto pool = nb::class_<PoolingLayer, Layer>(m, "IPoolingLayer");
  prop(pool, "type", &PoolingParams::type);
  prop(pool, "window_size_nd", &PoolingParams::window);
  prop_or_default(pool, "stride_nd", &PoolingParams::stride,
                  [](const PoolingLayer& l, const Dims& d) { return window_default(d, l.get().window, 1); });
  prop_or_default(pool, "pre_padding", &PoolingParams::pre_padding,
                  [](const PoolingLayer& l, const Dims& d) { return window_default(d, l.get().window, 0); });
  prop_or_default(pool, "post_padding", &PoolingParams::post_padding,
                  [](const PoolingLayer& l, const Dims& d) { return window_default(d, l.get().window, 0); });
  prop(pool, "padding_mode", &PoolingParams::padding_mode);
  prop(pool, "average_count_excludes_padding", &PoolingParams::average_count_excludes_padding);
  prop(pool, "blend_factor", &PoolingParams::blend_factor);
  pool.def_prop_rw("padding_nd", [](const PoolingLayer& l) { return window_default(l.get().pre_padding, l.get().window, 0); },
                   [](PoolingLayer& l, const Dims& d) {
    PoolingParams p = l.get();
    p.pre_padding = d;
    p.post_padding = d;
    l.set(p);
  });
  auto norm = nb::class_<NormalizationLayer, Layer>(m, "INormalizationLayer");
  prop(norm, "axes", &NormalizationParams::axes);
  prop(norm, "epsilon", &NormalizationParams::epsilon);
  prop(norm, "num_groups", &NormalizationParams::num_groups);
  auto resize = nb::class_<ResizeLayer, Layer>(m, "IResizeLayer");
  resize.def_prop_rw("shape", [](const ResizeLayer& l) { return l.get().output_dims; }, [](ResizeLayer& l, const Dims& d) {
    ResizeParams p = l.get();
    p.output_dims = d;
    p.scales.clear();
    l.set(p);
  });
  resize.def_prop_rw("scales", [](const ResizeLayer& l) { return l.get().scales; }, [](ResizeLayer& l, const std::vector<float>& v) {
    ResizeParams p = l.get();
    p.scales = v;
    p.output_dims.reset();
    l.set(p);
  });
  prop(resize, "resize_mode", &ResizeParams::mode);
  prop(resize, "coordinate_transformation", &ResizeParams::coordinate_transformation);
  prop(resize, "selector_for_single_pixel", &ResizeParams::selector_for_single_pixel);
  prop(resize, "nearest_rounding", &ResizeParams::nearest_rounding);
  prop(resize, "cubic_coeff", &ResizeParams::cubic_coeff);
  auto einsum = nb::class_<EinsumLayer, Layer>(m, "IEinsumLayer");
  prop(einsum, "equation", &EinsumParams::equation);

  nb::class_<PluginLayer, Layer>(m, "IPluginLayer")
      .def_prop_ro("creator_name", &PluginLayer::creator_name)
      .def_prop_ro("creator_version", &PluginLayer::creator_version)
      .def_prop_ro("plugin_namespace", &PluginLayer::plugin_namespace)
      .def_prop_ro("field_names", [](const PluginLayer& l) {
        std::vector<std::string> names;
        for (const auto& f : l.fields()) names.push_back(f.name);
        return names;
      });

  auto network_class = nb::class_<Network>(m, "INetworkDefinition", "A network definition (TensorRT's INetworkDefinition)");
  context_manager(network_class);
  network_class.def(nb::init<>())
      .def_prop_rw("name", &Network::name, &Network::set_name)
      .def("add_input", &Network::add_input, nb::arg("name"), nb::arg("dtype"), nb::arg("shape"), kRef)
      .def(
          "add_constant",
          [](Network& n, const Dims& shape, nb::handle weights) {
            return n.add_constant(shape, weights_from(weights, "add_constant weights"));
          },
          nb::arg("shape"), nb::arg("weights"), kRef)
      .def("add_matrix_multiply", &Network::add_matrix_multiply, nb::arg("input0"), nb::arg("op0"), nb::arg("input1"),
           nb::arg("op1"), kRef)
      .def("add_elementwise", &Network::add_elementwise, nb::arg("input1"), nb::arg("input2"), nb::arg("op"), kRef)
      .def("add_activation", &Network::add_activation, nb::arg("input"), nb::arg("type"), kRef)
      .def("add_cast", &Network::add_cast, nb::arg("input"), nb::arg("to_type"), kRef)
      .def("add_quantize", &Network::add_quantize, nb::arg("input"), nb::arg("scale"), nb::arg("output_type"), kRef)
      .def("add_dequantize", &Network::add_dequantize, nb::arg("input"), nb::arg("scale"), nb::arg("output_type"), kRef)
      .def("add_shuffle", &Network::add_shuffle, nb::arg("input"), kRef)
      .def("add_identity", &Network::add_identity, nb::arg("input"), kRef)
      .def("add_unary", &Network::add_unary, nb::arg("input"), nb::arg("op"), kRef)
      .def("add_reduce", &Network::add_reduce, nb::arg("input"), nb::arg("op"), nb::arg("axes"), nb::arg("keep_dims"), kRef)
      .def("add_softmax", &Network::add_softmax, nb::arg("input"), kRef)
      .def("add_concatenation", &Network::add_concatenation, nb::arg("inputs"), kRef)
      .def("add_slice", &Network::add_slice, nb::arg("input"), nb::arg("start"), nb::arg("shape"), nb::arg("stride"), kRef)
      .def("add_gather", &Network::add_gather, nb::arg("input"), nb::arg("indices"), nb::arg("axis"), kRef)
      .def("add_gather_v2", &Network::add_gather_v2, nb::arg("input"), nb::arg("indices"), nb::arg("mode"), kRef)
      .def("add_shape", &Network::add_shape, nb::arg("input"), kRef)
      .def("add_topk", &Network::add_topk, nb::arg("input"), nb::arg("op"), nb::arg("k"), nb::arg("axes"), kRef)
      .def("add_select", &Network::add_select, nb::arg("condition"), nb::arg("then_input"), nb::arg("else_input"), kRef)
      .def("add_padding_nd", &Network::add_padding_nd, nb::arg("input"), nb::arg("pre_padding"), nb::arg("post_padding"), kRef)
      .def(
          "add_convolution_nd",
          [](Network& n, Tensor* x, std::int32_t maps, const Dims& kernel_shape, nb::handle kernel, nb::handle bias) {
            return n.add_convolution_nd(x, maps, kernel_shape, weights_from(kernel, "convolution kernel"),
                                        optional_weights(bias, "convolution bias"));
          },
          nb::arg("input"), nb::arg("num_output_maps"), nb::arg("kernel_shape"), nb::arg("kernel"),
          nb::arg("bias") = nb::none(), kRef)
      .def(
          "add_deconvolution_nd",
          [](Network& n, Tensor* x, std::int32_t maps, const Dims& kernel_shape, nb::handle kernel, nb::handle bias) {
            return n.add_deconvolution_nd(x, maps, kernel_shape, weights_from(kernel, "deconvolution kernel"),
                                          optional_weights(bias, "deconvolution bias"));
          },
          nb::arg("input"), nb::arg("num_output_maps"), nb::arg("kernel_shape"), nb::arg("kernel"),
          nb::arg("bias") = nb::none(), kRef)
      .def("add_pooling_nd", &Network::add_pooling_nd, nb::arg("input"), nb::arg("type"), nb::arg("window_size"), kRef)
      .def("add_normalization", &Network::add_normalization, nb::arg("input"), nb::arg("scale"), nb::arg("bias"),
           nb::arg("axesMask"), kRef)
      .def("add_resize", &Network::add_resize, nb::arg("input"), kRef)
      .def("add_einsum", &Network::add_einsum, nb::arg("inputs"), nb::arg("equation"), kRef)
      .def(
          "add_scale",
          [](Network& n, Tensor* x, ScaleMode mode, nb::handle shift, nb::handle scale, nb::handle power) {
            return n.add_scale(x, mode, optional_weights(shift, "scale shift"), optional_weights(scale, "scale scale"),
                               optional_weights(power, "scale power"));
          },
          nb::arg("input"), nb::arg("mode"), nb::arg("shift") = nb::none(), nb::arg("scale") = nb::none(),
          nb::arg("power") = nb::none(), kRef)
      .def(
          "add_scale_nd",
          [](Network& n, Tensor* x, ScaleMode mode, nb::handle shift, nb::handle scale, nb::handle power, std::int32_t axis) {
            return n.add_scale_nd(x, mode, optional_weights(shift, "scale shift"), optional_weights(scale, "scale scale"),
                                  optional_weights(power, "scale power"), axis);
          },
          nb::arg("input"), nb::arg("mode"), nb::arg("shift") = nb::none(), nb::arg("scale") = nb::none(),
          nb::arg("power") = nb::none(), nb::arg("channel_axis") = 1, kRef)
      .def("add_parametric_relu", &Network::add_parametric_relu, nb::arg("input"), nb::arg("slopes"), kRef)
      .def("add_lrn", &Network::add_lrn, nb::arg("input"), nb::arg("window"), nb::arg("alpha"), nb::arg("beta"), nb::arg("k"),
           kRef)
      .def("add_cumulative", &Network::add_cumulative, nb::arg("input"), nb::arg("axis"), nb::arg("op"), nb::arg("exclusive"),
           nb::arg("reverse"), kRef)
      .def("add_scatter", &Network::add_scatter, nb::arg("data"), nb::arg("indices"), nb::arg("updates"), nb::arg("mode"), kRef)
      .def("add_one_hot", &Network::add_one_hot, nb::arg("indices"), nb::arg("values"), nb::arg("depth"), nb::arg("axis"), kRef)
      .def("add_squeeze", &Network::add_squeeze, nb::arg("input"), nb::arg("axes"), kRef)
      .def("add_unsqueeze", &Network::add_unsqueeze, nb::arg("input"), nb::arg("axes"), kRef)
      .def("add_reverse_sequence", &Network::add_reverse_sequence, nb::arg("input"), nb::arg("sequence_lens"), kRef)
      .def("add_fill", &Network::add_fill, nb::arg("shape"), nb::arg("op"), nb::arg("output_type") = DataType::kFLOAT, kRef)
      .def("add_loop", &Network::add_loop, kRef)
      .def("add_if_conditional", &Network::add_if_conditional, kRef)
      .def("add_attention", &Network::add_attention, nb::arg("query"), nb::arg("key"), nb::arg("value"),
           nb::arg("norm_op"), nb::arg("causal"), kRef)
      .def(
          "add_plugin",
          [](Network& n, const std::string& name, const std::string& version, const std::vector<Tensor*>& inputs,
             nb::handle fields, const std::string& plugin_namespace) {
            return n.add_plugin(name, version, inputs, plugin_fields_from(fields, plugin_namespace, name, version),
                                plugin_namespace);
          },
          nb::arg("name"), nb::arg("version"), nb::arg("inputs"), nb::arg("fields") = nb::none(),
          nb::arg("namespace") = "", kRef,
          "A layer of plugin creator (namespace, name, version) from a loaded library (plugins=), made from "
          "fields: a dict {name: value} or PluginField objects")
      .def("mark_output", &Network::mark_output, nb::arg("tensor"))
      .def("unmark_output", &Network::unmark_output, nb::arg("tensor"))
      // Layers as TensorRT counts them: a network input is no layer there (tensoracle keeps one
      // per input inside, LayerType.INPUT, which these leave out). len(network), network[i]
      // (negative from the end) and iteration follow TensorRT's sequence protocol.
      .def_prop_ro("num_layers", [](const Network& n) { return static_cast<int>(tensorrt_layers(n).size()); })
      .def_prop_ro("num_inputs", &Network::num_inputs)
      .def_prop_ro("num_outputs", &Network::num_outputs)
      .def(
          "get_layer",
          [](const Network& n, int i) {
            const auto layers = tensorrt_layers(n);
            if (i < 0 || i >= static_cast<int>(layers.size()))
              throw InvalidArgument("[network] get_layer(" + std::to_string(i) + "): the network has " +
                                    std::to_string(layers.size()) + " layers");
            return layers[static_cast<std::size_t>(i)];
          },
          nb::arg("index"), kRef)
      .def("__len__", [](const Network& n) { return tensorrt_layers(n).size(); })
      .def(
          "__getitem__",
          [](const Network& n, int i) {
            const auto layers = tensorrt_layers(n);
            const int size = static_cast<int>(layers.size());
            if (i < 0) i += size;
            if (i < 0 || i >= size) throw nb::index_error("network layer index out of range");
            return layers[static_cast<std::size_t>(i)];
          },
          kRef)
      .def("get_input", &Network::get_input, kRef)
      .def("get_output", &Network::get_output, kRef);
}

}  // namespace tensoracle::python
