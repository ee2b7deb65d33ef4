#include "graph/ops.h"

#include <algorithm>

#include "tensoracle/errors.h"

namespace tensoracle::graph {

namespace {

[[noreturn]] void invalid(const std::string& msg) { throw InvalidArgument(msg); }

bool is_float16ish_or_32(DataType t) {
  return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16;
}

std::string tname(DataType t) { return std::string(type_name(t)); }

void require_float(const TensorDesc& d, int index, const char* what) {
  if (!is_float16ish_or_32(d.type))
    invalid("input " + std::to_string(index) + " has type " + tname(d.type) + "; " + what +
            " takes float32, float16 or bfloat16");
}

void require_same_type(std::span<const TensorDesc> in, const char* what) {
  if (in[0].type != in[1].type)
    invalid("input 0 has type " + tname(in[0].type) + " but input 1 has type " + tname(in[1].type) +
            "; " + what + " needs both of one type (add a cast layer)");
}

int normalize_axis(std::int32_t axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank)
    invalid(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

void check_perm(const Permutation& p, int rank, const char* what) {
  std::array<bool, Dims::kMaxRank> seen{};
  for (int i = 0; i < rank; ++i) {
    int v = p.order[static_cast<std::size_t>(i)];
    if (v < 0 || v >= rank || seen[static_cast<std::size_t>(v)])
      invalid(std::string(what) + " " + perm_text(p, rank) + " is not a permutation of 0.." +
              std::to_string(rank - 1));
    seen[static_cast<std::size_t>(v)] = true;
  }
}

Dims permute(const Dims& d, const Permutation& p) {
  Dims out = d;
  for (int i = 0; i < d.rank(); ++i) out[i] = d[p.order[static_cast<std::size_t>(i)]];
  return out;
}

// Quantize/dequantize scale: a constant of one element, or 1-D of dims[axis] elements.
void check_scale(const TensorDesc& x, const TensorDesc& scale, const InputFacts& fact, std::int32_t axis,
                 DataType value_type, bool full) {
  if (!fact.is_constant) invalid("input 1 (scale) must be a constant (add_constant), as TensorRT requires");
  if (!is_float16ish_or_32(scale.type))
    invalid("input 1 (scale) has type " + tname(scale.type) + "; scales are float32, float16 or bfloat16");
  if (scale.type != DataType::kFLOAT && scale.type != value_type)
    invalid("input 1 (scale) has type " + tname(scale.type) + "; it must be float32 or " + tname(value_type));
  std::int64_t n = scale.dims.volume();
  if (n == 1) return;
  if (scale.dims.rank() != 1)
    invalid("input 1 (scale) has dims " + scale.dims.str() + "; scales are one element or 1-D (per channel)");
  int a = normalize_axis(axis, x.dims.rank(), "axis");
  if (!full) return;  // the axis may still be set: its size is checked when the network is built
  if (scale.dims.rank() != 1 || x.dims[a] < 0 || n != x.dims[a])
    invalid("input 1 (scale) has dims " + scale.dims.str() + "; per-channel scales need 1-D dims (" +
            std::to_string(x.dims[a]) + ") matching input 0's axis " + std::to_string(a) + " of " + x.dims.str());
}

// Matrix multiply: each operand contributes its last 2 dims (1 for kVECTOR) as the matrix; the
// leading dims are batch dims, of equal count, broadcast where one is 1.
TensorDesc infer_matmul(const MatrixMultiplyParams& p, std::span<const TensorDesc> in) {
  require_float(in[0], 0, "matrix multiply");
  require_float(in[1], 1, "matrix multiply");
  require_same_type(in, "matrix multiply");
  const MatrixOperation ops[2] = {p.op0, p.op1};
  std::int64_t rows[2] = {1, 1}, cols[2] = {1, 1};
  int batch_rank[2];
  for (int i = 0; i < 2; ++i) {
    const Dims& d = in[i].dims;
    int mat_rank = ops[i] == MatrixOperation::kVECTOR ? 1 : 2;
    if (d.rank() < mat_rank)
      invalid("input " + std::to_string(i) + " has dims " + d.str() + "; operation " +
              (mat_rank == 2 ? "NONE/TRANSPOSE needs rank >= 2" : "VECTOR needs rank >= 1"));
    batch_rank[i] = d.rank() - mat_rank;
    if (mat_rank == 2) {
      rows[i] = d[d.rank() - 2];
      cols[i] = d[d.rank() - 1];
      if (ops[i] == MatrixOperation::kTRANSPOSE) std::swap(rows[i], cols[i]);
    } else {
      (i == 0 ? cols[0] : rows[1]) = d[d.rank() - 1];
    }
  }
  if (batch_rank[0] != batch_rank[1])
    invalid("inputs have dims " + in[0].dims.str() + " and " + in[1].dims.str() +
            ": their batch dimensions differ in count (" + std::to_string(batch_rank[0]) + " vs " +
            std::to_string(batch_rank[1]) + "); reshape one with a shuffle layer");
  if (cols[0] >= 0 && rows[1] >= 0 && cols[0] != rows[1])
    invalid("inner dimensions differ: input 0 " + in[0].dims.str() + " gives K=" + std::to_string(cols[0]) +
            ", input 1 " + in[1].dims.str() + " gives K=" + std::to_string(rows[1]));
  std::vector<std::int64_t> out;
  for (int b = 0; b < batch_rank[0]; ++b) {
    std::int64_t x = in[0].dims[b], y = in[1].dims[b];
    if (x >= 0 && y >= 0 && x != y && x != 1 && y != 1)
      invalid("batch dimension " + std::to_string(b) + " differs: " + std::to_string(x) + " vs " +
              std::to_string(y) + " (broadcast needs equal dims or 1)");
    out.push_back(x == 1 ? y : y == 1 ? x : (x >= 0 ? x : y));
  }
  if (ops[0] != MatrixOperation::kVECTOR) out.push_back(rows[0]);
  if (ops[1] != MatrixOperation::kVECTOR) out.push_back(cols[1]);
  return {in[0].type, Dims(std::span<const std::int64_t>(out))};
}

TensorDesc infer_elementwise(const ElementWiseParams& p, std::span<const TensorDesc> in) {
  using E = ElementWiseOperation;
  require_same_type(in, "elementwise");
  DataType t = in[0].type;
  bool fl = is_float16ish_or_32(t), integer = t == DataType::kINT32 || t == DataType::kINT64;
  DataType out = t;
  switch (p.op) {
    case E::kSUM: case E::kPROD: case E::kMAX: case E::kMIN: case E::kSUB: case E::kDIV: case E::kFLOOR_DIV:
      if (!fl && !integer)
        invalid("inputs have type " + tname(t) + "; this operation takes float32, float16, bfloat16, int32 or int64");
      break;
    case E::kPOW:
      if (!fl) invalid("inputs have type " + tname(t) + "; POW takes float32, float16 or bfloat16");
      break;
    case E::kAND: case E::kOR: case E::kXOR:
      if (t != DataType::kBOOL) invalid("inputs have type " + tname(t) + "; AND, OR and XOR take bool");
      break;
    case E::kEQUAL:
      if (!fl && !integer && t != DataType::kBOOL)
        invalid("inputs have type " + tname(t) + "; EQUAL takes float, int32, int64 or bool");
      out = DataType::kBOOL;
      break;
    case E::kGREATER: case E::kLESS:
      if (!fl && !integer) invalid("inputs have type " + tname(t) + "; GREATER and LESS take float, int32 or int64");
      out = DataType::kBOOL;
      break;
    default: invalid("unknown elementwise operation " + std::to_string(static_cast<int>(p.op)));
  }
  return {out, broadcast_dims(in[0].dims, in[1].dims)};
}

TensorDesc infer_cast(const CastParams& p, const TensorDesc& x) {
  auto ok = [](DataType t) { return is_valid(t) && t != DataType::kFP8; };
  if (!is_valid(p.to)) invalid("to_type " + std::to_string(static_cast<int>(p.to)) + " is not a data type");
  if (!ok(x.type) || !ok(p.to))
    invalid("cannot cast " + tname(x.type) + " to " + tname(p.to) +
            "; fp8 values come from add_quantize and leave through add_dequantize");
  return {p.to, x.dims};
}

}  // namespace

std::string perm_text(const Permutation& p, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(p.order[static_cast<std::size_t>(i)]);
  return s + ")";
}

InputArity input_arity(LayerType type) noexcept {
  switch (type) {
    case LayerType::kINPUT: case LayerType::kCONSTANT: return {0, 0};
    case LayerType::kMATRIX_MULTIPLY: case LayerType::kELEMENTWISE: case LayerType::kQUANTIZE:
    case LayerType::kDEQUANTIZE: case LayerType::kGATHER: return {2, 2};
    case LayerType::kCONVOLUTION: case LayerType::kDECONVOLUTION: return {2, 3};  // optional bias
    case LayerType::kSELECT: case LayerType::kNORMALIZATION: return {3, 3};
    case LayerType::kSHUFFLE: return {1, 2};  // optional reshape dims tensor
    case LayerType::kSLICE: return {1, 5};    // optional start, size, stride, fill value
    case LayerType::kCONCATENATION: case LayerType::kEINSUM: return {1, -1};
    case LayerType::kPLUGIN: return {0, -1};
    default: return {1, 1};
  }
}

Dims broadcast_dims(const Dims& a, const Dims& b) {
  if (a.rank() != b.rank())
    invalid("inputs have dims " + a.str() + " and " + b.str() +
            " of different rank; TensorRT broadcasting needs equal ranks (reshape with a shuffle layer)");
  Dims out = a;
  for (int i = 0; i < a.rank(); ++i) {
    std::int64_t x = a[i], y = b[i];
    if (x >= 0 && y >= 0 && x != y && x != 1 && y != 1)
      invalid("inputs have dims " + a.str() + " and " + b.str() + ": dimension " + std::to_string(i) +
              " is neither equal nor 1");
    out[i] = x == 1 ? y : y == 1 ? x : (x >= 0 ? x : y);
  }
  return out;
}

bool is_shape_tensor_type(DataType t) noexcept { return t == DataType::kINT32 || t == DataType::kINT64; }

std::optional<std::uint64_t> byte_size(DataType t, const Dims& d) noexcept {
  const std::int64_t n = d.volume();  // -1 for an unknown dim or an overflowing product
  std::uint64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(element_size(t)), &bytes))
    return std::nullopt;
  return bytes;
}

std::optional<std::vector<std::int64_t>> shape_values_of(const Weights& w) {
  if (!is_shape_tensor_type(w.type()) || w.count() > kMaxShapeTensorElements || w.values() == nullptr) return std::nullopt;
  std::vector<std::int64_t> v(static_cast<std::size_t>(w.count()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = w.type() == DataType::kINT32 ? static_cast<const std::int32_t*>(w.values())[i]
                                        : static_cast<const std::int64_t*>(w.values())[i];
  return v;
}

Dims reshape_dims(const Dims& input, const Dims& spec, bool zero_is_placeholder, bool full) {
  if (!full) {
    // Always wrong, whatever the other properties: more than one -1, dims below -1.
    int minus_ones = 0;
    for (auto v : spec) {
      if (v < -1) invalid("reshape_dims " + spec.str() + " has negative dimension " + std::to_string(v));
      minus_ones += v == -1;
    }
    if (minus_ones > 1) invalid("reshape_dims " + spec.str() + " has more than one -1");
    try {
      return reshape_dims(input, spec, zero_is_placeholder, true);
    } catch (const InvalidArgument&) {
      Dims out = spec;  // other properties may still change: resolved when the network is built
      for (int i = 0; i < spec.rank(); ++i)
        if (spec[i] == -1 || (spec[i] == 0 && zero_is_placeholder)) out[i] = i < input.rank() && spec[i] == 0 ? input[i] : -1;
      return out;
    }
  }
  Dims out = spec;
  int infer_at = -1;
  std::int64_t known = 1;
  bool unknown = false;
  for (int i = 0; i < spec.rank(); ++i) {
    std::int64_t v = spec[i];
    if (v == 0 && zero_is_placeholder) {
      if (i >= input.rank())
        invalid("reshape_dims " + spec.str() + ": 0 at index " + std::to_string(i) + " copies a dimension the input " +
                input.str() + " does not have");
      v = input[i];
    } else if (v == -1) {
      if (infer_at >= 0) invalid("reshape_dims " + spec.str() + " has more than one -1");
      infer_at = i;
      continue;
    } else if (v < 0) {
      invalid("reshape_dims " + spec.str() + " has negative dimension " + std::to_string(v));
    }
    out[i] = v;
    if (v < 0) unknown = true;
    else known *= v;
  }
  std::int64_t volume = input.volume();
  if (infer_at >= 0) {
    if (volume < 0 || unknown) {
      out[infer_at] = -1;
    } else {
      if (known == 0 || volume % known != 0)
        invalid("reshape_dims " + spec.str() + " cannot hold the " + std::to_string(volume) + " elements of " + input.str());
      out[infer_at] = volume / known;
    }
  } else if (volume >= 0 && !unknown && volume != known) {
    invalid("reshape_dims " + spec.str() + " hold " + std::to_string(known) + " elements but the input " +
            input.str() + " has " + std::to_string(volume));
  }
  return out;
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
  return std::visit(
      [&](const auto& p) -> std::vector<TensorDesc> {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, InputParams>) {
          invalid("inputs are declared with add_input");
        } else if constexpr (std::is_same_v<P, ConstantParams>) {
          for (auto d : p.shape)
            if (d < 0) invalid("shape " + p.shape.str() + " has a negative dimension");
          if (p.weights.count() != p.shape.volume())
            invalid("weights hold " + std::to_string(p.weights.count()) + " values but shape " + p.shape.str() +
                    " needs " + std::to_string(p.shape.volume()));
          if (p.weights.count() > 0 && p.weights.values() == nullptr) invalid("weights have no values");
          return {{p.weights.type(), p.shape}};
        } else if constexpr (std::is_same_v<P, MatrixMultiplyParams>) {
          return {infer_matmul(p, in)};
        } else if constexpr (std::is_same_v<P, ElementWiseParams>) {
          return {infer_elementwise(p, in)};
        } else if constexpr (std::is_same_v<P, ActivationParams>) {
          require_float(in[0], 0, "activation");
          if (static_cast<int>(p.type) < 0 || static_cast<int>(p.type) > static_cast<int>(ActivationType::kGELU_TANH))
            invalid("unknown activation type " + std::to_string(static_cast<int>(p.type)));
          return {in[0]};
        } else if constexpr (std::is_same_v<P, CastParams>) {
          return {infer_cast(p, in[0])};
        } else if constexpr (std::is_same_v<P, QuantizeParams>) {
          require_float(in[0], 0, "quantize");
          if (p.to != DataType::kINT8 && p.to != DataType::kFP8)
            invalid("to_type " + tname(p.to) + " is not a quantized type; use int8 or fp8");
          check_scale(in[0], in[1], facts[1], p.axis, in[0].type, full);
          return {{p.to, in[0].dims}};
        } else if constexpr (std::is_same_v<P, DequantizeParams>) {
          if (in[0].type != DataType::kINT8 && in[0].type != DataType::kFP8)
            invalid("input 0 has type " + tname(in[0].type) + "; dequantize takes int8 or fp8");
          if (!is_float16ish_or_32(p.to))
            invalid("to_type " + tname(p.to) + " is not float32, float16 or bfloat16");
          check_scale(in[0], in[1], facts[1], p.axis, p.to, full);
          return {{p.to, in[0].dims}};
        } else if constexpr (std::is_same_v<P, ShuffleParams>) {
          int rank = in[0].dims.rank();
          check_perm(p.first_transpose, rank, "first_transpose");
          Dims d = permute(in[0].dims, p.first_transpose);
          if (in.size() > 1) {
            // Input 1 (a shape tensor) gives the reshape dims at run time; they override
            // reshape_dims. Its length is the output's rank; its values, when shape inference
            // knows them, the dims.
            const TensorDesc& s = in[1];
            if (!is_shape_tensor_type(s.type) || s.dims.rank() != 1 || s.dims[0] < 0 || s.dims[0] > Dims::kMaxRank)
              invalid("input 1 (the reshape dims) is " + tname(s.type) + s.dims.str() +
                      "; it must be a 1-D int32 or int64 shape tensor of known length <= 8");
            if (facts.size() > 1 && facts[1].values) {
              d = reshape_dims(d, Dims(std::span<const std::int64_t>(*facts[1].values)), p.zero_is_placeholder, full);
            } else {
              std::vector<std::int64_t> unknown(static_cast<std::size_t>(s.dims[0]), -1);
              d = Dims(std::span<const std::int64_t>(unknown));
            }
          } else if (p.reshape_dims) {
            d = reshape_dims(d, *p.reshape_dims, p.zero_is_placeholder, full);
          }
          check_perm(p.second_transpose, d.rank(), "second_transpose");
          return {{in[0].type, permute(d, p.second_transpose)}};
        } else if constexpr (std::is_same_v<P, IdentityParams>) {
          return {in[0]};
        } else {
          return infer_more(p, in, facts, full);
        }
      },
      params);
}

}  // namespace tensoracle::graph
