// The ONNX importer's helpers (onnx/importer.h): types, tensors' weights, parse-time values,
// attributes and the layer recipes the converters share.
#include "onnx/importer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "backends/cpu/cpu_backend.h"
#include "core/mapped_file.h"
#include "core/numeric.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::onnx {

namespace {

// Folding on the host is for parameters (shapes, axes, bounds): small values only.
constexpr std::int64_t kMaxFoldElements = 1 << 16;
constexpr int kMaxFoldDepth = 24;

}  // namespace

void fail(OnnxErrorCode code, const std::string& what) { throw NodeError(code, what); }

Dims dims_of(const std::vector<std::int64_t>& v) {
  if (v.size() > static_cast<std::size_t>(Dims::kMaxRank))
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "rank " + std::to_string(v.size()) + " is above " + std::to_string(Dims::kMaxRank));
  return Dims(std::span<const std::int64_t>(v));
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(OnnxErrorCode::kINVALID_NODE, std::string(what) + " does not fit in 64 bits");
  return r;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(OnnxErrorCode::kINVALID_NODE, std::string(what) + " does not fit in 64 bits");
  return r;
}

std::optional<DataType> data_type_of(std::int32_t t) noexcept {
  switch (t) {
    case 1: return DataType::kFLOAT;
    case 2: return DataType::kUINT8;
    case 3: return DataType::kINT8;
    case 6: return DataType::kINT32;
    case 7: return DataType::kINT64;
    case 9: return DataType::kBOOL;
    case 10: return DataType::kHALF;
    case 16: return DataType::kBF16;
    case 17: return DataType::kFP8;
    default: return std::nullopt;
  }
}

std::string onnx_type_name(std::int32_t t) {
  static const char* const names[] = {"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                      "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
                                      "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                                      "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "float8e8m0", "uint2", "int2"};
  if (t >= 0 && t < static_cast<std::int32_t>(std::size(names))) return names[t];
  return "data type " + std::to_string(t);
}

// ---- Known ----------------------------------------------------------------------------------

std::vector<std::int64_t> Known::ints() const {
  const auto n = static_cast<std::size_t>(weights.count());
  std::vector<std::int64_t> out(n);
  const void* p = weights.values();
  switch (weights.type()) {
    case DataType::kINT64: if (n > 0) std::memcpy(out.data(), p, n * 8); break;
    case DataType::kINT32: for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<const std::int32_t*>(p)[i]; break;
    case DataType::kINT8: for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<const std::int8_t*>(p)[i]; break;
    case DataType::kUINT8:
    case DataType::kBOOL: for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<const std::uint8_t*>(p)[i]; break;
    default: {
      // Float values as integers: truncated, clamped into int64 (NaN gives 0).
      auto f = floats();
      for (std::size_t i = 0; i < n; ++i)
        out[i] = !(f[i] == f[i]) ? 0 : f[i] >= 9.2e18 ? INT64_MAX : f[i] <= -9.2e18 ? INT64_MIN : static_cast<std::int64_t>(f[i]);
    }
  }
  return out;
}

std::vector<double> Known::floats() const {
  const auto n = static_cast<std::size_t>(weights.count());
  std::vector<double> out(n);
  const void* p = weights.values();
  switch (weights.type()) {
    case DataType::kFLOAT: for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<const float*>(p)[i]; break;
    case DataType::kHALF:
      for (std::size_t i = 0; i < n; ++i) out[i] = core::half_to_float(static_cast<const std::uint16_t*>(p)[i]);
      break;
    case DataType::kBF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = core::bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
      break;
    case DataType::kFP8:
      for (std::size_t i = 0; i < n; ++i) out[i] = core::fp8_e4m3_to_float(static_cast<const std::uint8_t*>(p)[i]);
      break;
    default: {
      auto v = ints();
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(v[i]);
    }
  }
  return out;
}

// ---- tensors' weights ----------------------------------------------------------------------

namespace {

}  // namespace

std::filesystem::path external_data_path(const pb::TensorProto& t, const std::string& folder) {
  std::string location;
  for (const auto& kv : t.external_data())
    if (kv.key() == "location") location = kv.value();
  if (location.empty())
    fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "': external data without a location");
  if (folder.empty())
    fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "' keeps its data in the external file '" + location +
                                            "': parse the model from its file (parse_from_file, or parse with the "
                                            "model's path) so that the file can be found beside it");
  namespace fs = std::filesystem;
  const fs::path rel(location);
  if (rel.is_absolute() || location.find('\0') != std::string::npos)
    fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "': external data location '" + location +
                                            "' is absolute; it must name a file in the model's folder");
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(folder), ec);
  const fs::path full = fs::weakly_canonical(fs::path(folder) / rel, ec);
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (ec || b != base.end() || f == full.end())
    fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "': external data location '" + location +
                                            "' leaves the model's folder " + folder);
  return full;
}

namespace {

// The bytes of an external-data tensor: `location` relative to `folder`, never leaving it.
std::span<const std::byte> external_bytes(const pb::TensorProto& t, const std::string& folder, std::size_t want,
                                          std::shared_ptr<const void>& keep) {
  std::string location;
  std::uint64_t offset = 0, length = 0;
  bool has_length = false;
  for (const auto& kv : t.external_data()) {
    auto number = [&](const std::string& s) {
      std::uint64_t v = 0;
      if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "': external data " + kv.key() + " '" + s +
                                                "' is not a non-negative integer");
      for (char c : s) v = v * 10 + static_cast<std::uint64_t>(c - '0');
      return v;
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number(kv.value());
    else if (kv.key() == "length") { length = number(kv.value()); has_length = true; }
  }
  const auto full = external_data_path(t, folder);
  std::shared_ptr<core::MappedFile> mapped;
  try {
    mapped = std::make_shared<core::MappedFile>(full, false, "[onnx]");
  } catch (const Error& e) {
    fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "': external data: " + e.what());
  }
  const auto bytes = mapped->bytes();
  if (!has_length) length = want;
  if (length != want || offset > bytes.size() || bytes.size() - offset < length)
    fail(OnnxErrorCode::kINVALID_VALUE, "tensor '" + t.name() + "': external data in '" + location + "' at offset " +
                                            std::to_string(offset) + " length " + std::to_string(length) + " does not hold its " +
                                            std::to_string(want) + " bytes (the file has " + std::to_string(bytes.size()) + ")");
  keep = mapped;
  return bytes.subspan(offset, length);
}

}  // namespace

Known read_tensor(const pb::TensorProto& t, const std::shared_ptr<const void>& owner, const std::string& folder) {
  const std::string name = "tensor '" + t.name() + "'";
  auto type = data_type_of(t.data_type());
  if (!type)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE, name + " has ONNX type " + onnx_type_name(t.data_type()) +
                                                        ", which tensoracle has no type for");
  if (t.has_segment()) fail(OnnxErrorCode::kINVALID_VALUE, name + " is segmented (TensorProto.segment)");
  if (t.dims_size() > Dims::kMaxRank)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, name + " has rank " + std::to_string(t.dims_size()) + "; at most " +
                                                     std::to_string(Dims::kMaxRank) + " is supported");
  Dims dims;
  std::vector<std::int64_t> d;
  for (auto v : t.dims()) {
    if (v < 0) fail(OnnxErrorCode::kINVALID_VALUE, name + " has a negative dimension " + std::to_string(v));
    d.push_back(v);
  }
  dims = dims_of(d);
  const auto bytes = graph::byte_size(*type, dims);
  if (!bytes || *bytes > (std::uint64_t{1} << 46))
    fail(OnnxErrorCode::kINVALID_VALUE, name + " has dims " + dims.str() + " whose size does not fit");
  const auto count = dims.volume();
  const auto es = element_size(*type);
  if (t.data_location() == pb::TensorProto::EXTERNAL) {
    std::shared_ptr<const void> keep;
    auto span = external_bytes(t, folder, *bytes, keep);
    return {Weights(*type, span.data(), count, keep), dims};
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != *bytes)
      fail(OnnxErrorCode::kINVALID_VALUE, name + " holds " + std::to_string(t.raw_data().size()) + " bytes of raw data; " +
                                              std::string(type_name(*type)) + " " + dims.str() + " needs " + std::to_string(*bytes));
    return {Weights(*type, t.raw_data().data(), count, owner), dims};
  }
  auto mismatch = [&](std::size_t have) {
    fail(OnnxErrorCode::kINVALID_VALUE, name + " holds " + std::to_string(have) + " elements; its dims " + dims.str() +
                                            " need " + std::to_string(count));
  };
  switch (*type) {
    case DataType::kFLOAT:
      if (static_cast<std::int64_t>(t.float_data_size()) != count) mismatch(static_cast<std::size_t>(t.float_data_size()));
      return {Weights(*type, t.float_data().data(), count, owner), dims};
    case DataType::kINT64:
      if (static_cast<std::int64_t>(t.int64_data_size()) != count) mismatch(static_cast<std::size_t>(t.int64_data_size()));
      return {Weights(*type, t.int64_data().data(), count, owner), dims};
    case DataType::kINT32:
      if (static_cast<std::int64_t>(t.int32_data_size()) != count) mismatch(static_cast<std::size_t>(t.int32_data_size()));
      return {Weights(*type, t.int32_data().data(), count, owner), dims};
    default: {
      // Narrow types are stored one per int32 element (their bits).
      if (static_cast<std::int64_t>(t.int32_data_size()) != count) mismatch(static_cast<std::size_t>(t.int32_data_size()));
      std::vector<std::byte> out(static_cast<std::size_t>(count) * es + 1);
      for (std::int64_t i = 0; i < count; ++i) {
        const auto v = static_cast<std::uint32_t>(t.int32_data(static_cast<int>(i)));
        std::memcpy(out.data() + static_cast<std::size_t>(i) * es, &v, es);  // little-endian low bytes
      }
      return {Weights::copy_of(*type, out.data(), count), dims};
    }
  }
}

// ---- the importer ---------------------------------------------------------------------------

Tensor* Importer::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail(OnnxErrorCode::kINVALID_GRAPH, "tensor '" + name + "' is not a graph input, an initializer or the output of an "
                                        "earlier node (ONNX graphs list nodes in topological order)");
  return it->second;
}

void Importer::bind(const std::string& name, Tensor* t) {
  if (name.empty()) return;
  if (tensors_.count(name))
    fail(OnnxErrorCode::kINVALID_GRAPH, "tensor '" + name + "' is produced twice (ONNX graphs are in SSA form)");
  tensors_[name] = t;
}

std::optional<Known> Importer::value(Tensor* t) { return value(t, 0); }

std::optional<Known> Importer::value(Tensor* t, int depth) {
  if (t == nullptr) return std::nullopt;
  if (auto it = known_.find(t); it != known_.end()) return it->second;
  Layer* l = t->producer();
  if (l == nullptr || l->type() == LayerType::kINPUT) return std::nullopt;
  if (l->type() == LayerType::kCONSTANT) {
    const auto& p = std::get<ConstantParams>(l->params());
    return Known{p.weights, p.shape};
  }
  if (l->type() == LayerType::kSHAPE) {
    const Dims& d = l->get_input(0)->dims();
    if (!d.all_known()) return std::nullopt;
    auto v = d.vec();
    Known k{Weights::copy_of(DataType::kINT64, v.data(), static_cast<std::int64_t>(v.size())),
            Dims{static_cast<std::int64_t>(v.size())}};
    known_.emplace(t, k);
    return k;
  }
  // Plugins and control flow (a recurrence changes from one iteration to the next) are not folded.
  if (depth > kMaxFoldDepth || l->num_outputs() != 1 || l->type() == LayerType::kPLUGIN || l->type() >= LayerType::kTRIP_LIMIT)
    return std::nullopt;
  const auto volume = t->dims().volume();
  if (volume < 0 || volume > kMaxFoldElements) return std::nullopt;
  auto k = evaluate(*l, depth);
  if (k) known_.emplace(t, *k);
  return k;
}

std::optional<Known> Importer::evaluate(Layer& layer, int depth) {
  graph::Graph g;
  graph::Node n;
  n.name = layer.name();
  n.params = layer.params();
  for (Tensor* in : layer.stored_inputs()) {
    auto k = value(in, depth + 1);
    if (!k) return std::nullopt;
    graph::Value v;
    v.name = in->name();
    v.desc = {in->type(), k->dims};
    v.constant = k->weights;
    n.inputs.push_back(static_cast<int>(g.values.size()));
    g.values.push_back(std::move(v));
  }
  Tensor* out = layer.get_output(0);
  graph::Value ov;
  ov.name = out->name();
  ov.desc = {out->type(), out->dims()};
  ov.producer = 0;
  n.main_desc = ov.desc;
  n.output = static_cast<int>(g.values.size());
  g.values.push_back(std::move(ov));
  g.nodes.push_back(std::move(n));
  try {
    Weights w = cpu::evaluate_constant_node(g, g.nodes[0]);
    return Known{std::move(w), out->dims()};
  } catch (const Error&) {
    return std::nullopt;  // the layer then runs in the engine, which reports the problem
  }
}

std::optional<std::vector<Importer::SymDim>> Importer::symbolic(Tensor* t, int depth) {
  if (t == nullptr || depth > kMaxFoldDepth || (t->type() != DataType::kINT64 && t->type() != DataType::kINT32) ||
      t->dims().rank() > 1 || (t->dims().rank() == 1 && (t->dims()[0] < 0 || t->dims()[0] > Dims::kMaxRank)))
    return std::nullopt;
  if (auto k = value(t)) {
    std::vector<SymDim> out;
    for (auto v : k->ints()) out.push_back({v, nullptr, -1});
    return out;
  }
  Layer* l = t->producer();
  if (l == nullptr) return std::nullopt;
  auto in = [&](int i) { return symbolic(l->get_input(i), depth + 1); };
  switch (l->type()) {
    case LayerType::kSHAPE: {
      const Tensor* x = l->get_input(0);
      std::vector<SymDim> out;
      for (int i = 0; i < x->dims().rank(); ++i)
        out.push_back(x->dims()[i] >= 0 ? SymDim{x->dims()[i], nullptr, -1} : SymDim{std::nullopt, x, i});
      return out;
    }
    case LayerType::kCAST:
    case LayerType::kIDENTITY:
      return in(0);
    case LayerType::kSHUFFLE: {  // a reshape between 0-D and 1-D: the same entries
      const auto& p = std::get<ShuffleParams>(l->params());
      if (l->num_inputs() != 1 || p.first_transpose != Permutation{} || p.second_transpose != Permutation{}) return std::nullopt;
      return in(0);
    }
    case LayerType::kCONCATENATION: {
      std::vector<SymDim> out;
      for (int i = 0; i < l->num_inputs(); ++i) {
        auto part = in(i);
        if (!part) return std::nullopt;
        out.insert(out.end(), part->begin(), part->end());
      }
      if (out.size() > static_cast<std::size_t>(Dims::kMaxRank)) return std::nullopt;
      return out;
    }
    case LayerType::kGATHER: {
      const auto& p = std::get<GatherParams>(l->params());
      auto data = in(0);
      auto idx = value(l->get_input(1));
      if (!data || !idx || p.mode != GatherMode::kDEFAULT || p.axis != 0) return std::nullopt;
      std::vector<SymDim> out;
      for (auto i : idx->ints()) {
        if (i < 0) i += static_cast<std::int64_t>(data->size());
        if (i < 0 || i >= static_cast<std::int64_t>(data->size())) return std::nullopt;
        out.push_back((*data)[static_cast<std::size_t>(i)]);
      }
      return out;
    }
    case LayerType::kSLICE: {
      const auto& p = std::get<SliceParams>(l->params());
      auto data = in(0);
      if (!data || p.tensor_inputs != 0 || p.mode != SampleMode::kSTRICT_BOUNDS || p.start.rank() != 1) return std::nullopt;
      std::vector<SymDim> out;
      for (std::int64_t i = 0; i < p.size[0]; ++i) {
        const auto at = p.start[0] + i * p.stride[0];
        if (at < 0 || at >= static_cast<std::int64_t>(data->size())) return std::nullopt;
        out.push_back((*data)[static_cast<std::size_t>(at)]);
      }
      return out;
    }
    default:
      return std::nullopt;
  }
}

bool Importer::same_dim(const Tensor* a, int a_axis, const Tensor* b, int b_axis) const {
  const Tensor* cur = b;
  int axis = b_axis;
  for (int step = 0; step <= kMaxFoldDepth; ++step) {
    if (cur == a) return axis == a_axis;
    const Layer* l = cur->producer();
    if (l == nullptr || axis < 0 || axis >= cur->dims().rank()) return false;
    const int rank = cur->dims().rank();
    // input i of l when it has cur's rank and is not broadcast along `axis`
    auto carried = [&](int i) -> const Tensor* {
      const Tensor* in = l->get_input(i);
      return in != nullptr && in->dims().rank() == rank && in->dims()[axis] != 1 ? in : nullptr;
    };
    auto broadcast = [&](int i) {
      const Tensor* in = l->get_input(i);
      return in != nullptr && (in->dims().rank() < rank - axis || (in->dims().rank() == rank && in->dims()[axis] == 1));
    };
    const Tensor* next = nullptr;
    switch (l->type()) {
      case LayerType::kACTIVATION:
      case LayerType::kUNARY:
      case LayerType::kCAST:
      case LayerType::kIDENTITY:
      case LayerType::kSOFTMAX:
      case LayerType::kNORMALIZATION:
        next = carried(0);
        break;
      case LayerType::kELEMENTWISE:  // the one operand that has the dim, the other 1 there
        if (carried(0) && broadcast(1)) next = carried(0);
        else if (carried(1) && broadcast(0)) next = carried(1);
        break;
      case LayerType::kMATRIX_MULTIPLY: {
        const auto& p = std::get<MatrixMultiplyParams>(l->params());
        if (axis < rank - 2 && broadcast(1)) next = carried(0);
        else if (axis == rank - 2 && p.op0 == MatrixOperation::kNONE) next = carried(0);
        break;
      }
      case LayerType::kSHUFFLE: {
        const auto& p = std::get<ShuffleParams>(l->params());
        if (l->num_inputs() == 1 && p.first_transpose == Permutation{} && p.second_transpose == Permutation{} &&
            p.reshape_dims && p.zero_is_placeholder && axis < p.reshape_dims->rank() && (*p.reshape_dims)[axis] == 0)
          next = l->get_input(0);
        break;
      }
      default:
        break;
    }
    if (next == nullptr) return false;
    cur = next;
  }
  return false;
}

void Importer::require_shape_computable(Tensor* t, std::string_view what) {
  std::vector<Tensor*> todo{t};
  std::unordered_map<const Tensor*, bool> seen;
  while (!todo.empty()) {
    Tensor* cur = todo.back();
    todo.pop_back();
    if (!seen.emplace(cur, true).second) continue;
    Layer* l = cur->producer();
    if (l == nullptr || l->type() == LayerType::kSHAPE || l->type() == LayerType::kCONSTANT) continue;
    if (l->type() == LayerType::kINPUT)
      fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC,
           std::string(what) + " is computed from the values of network input '" + cur->name() +
               "'; tensoracle takes reshape dims, slice bounds and expand shapes from constants and tensors' shapes "
               "only (it has no shape-tensor inputs)");
    for (Tensor* in : l->stored_inputs()) todo.push_back(in);
  }
}

Tensor* Importer::constant(const Dims& dims, Weights w) { return net_.add_constant(dims, std::move(w))->get_output(0); }

Tensor* Importer::constant_i64(const std::vector<std::int64_t>& v, const Dims& dims) {
  return constant(dims, Weights::copy_of(DataType::kINT64, v.data(), static_cast<std::int64_t>(v.size())));
}

Tensor* Importer::scalar(DataType type, double v, int rank) {
  std::vector<std::int64_t> ones(static_cast<std::size_t>(rank), 1);
  const Dims dims{std::span<const std::int64_t>(ones)};
  std::byte buf[8] = {};
  // Values come from a model: clamped into the type's range before converting (a conversion out
  // of range is undefined behaviour), NaN kept for floats and 0 for integers.
  auto clamp = [v](double lo, double hi) { return v != v ? 0.0 : std::clamp(v, lo, hi); };
  const float f = v != v ? static_cast<float>(v) : static_cast<float>(std::clamp(v, -3.4028234663852886e38, 3.4028234663852886e38));
  switch (type) {
    case DataType::kFLOAT: std::memcpy(buf, &f, 4); break;
    case DataType::kHALF: { auto h = core::float_to_half(f); std::memcpy(buf, &h, 2); break; }
    case DataType::kBF16: { auto h = core::float_to_bf16(f); std::memcpy(buf, &h, 2); break; }
    case DataType::kINT32: { auto i = static_cast<std::int32_t>(clamp(-2147483648.0, 2147483647.0)); std::memcpy(buf, &i, 4); break; }
    case DataType::kINT64: {
      auto i = static_cast<std::int64_t>(clamp(-9.2233720368547758e18, 9.2233720368547748e18));
      std::memcpy(buf, &i, 8);
      break;
    }
    case DataType::kINT8: { auto i = static_cast<std::int8_t>(clamp(-128, 127)); std::memcpy(buf, &i, 1); break; }
    case DataType::kUINT8: { auto i = static_cast<std::uint8_t>(clamp(0, 255)); std::memcpy(buf, &i, 1); break; }
    case DataType::kBOOL: { std::uint8_t i = v != 0; std::memcpy(buf, &i, 1); break; }
    case DataType::kFP8: { auto i = core::float_to_fp8_e4m3(f, true); std::memcpy(buf, &i, 1); break; }
  }
  return constant(dims, Weights::copy_of(type, buf, 1));
}

Tensor* Importer::reshape(Tensor* x, const Dims& dims, bool zero_is_placeholder) {
  auto* s = net_.add_shuffle(x);
  s->set_zero_is_placeholder(zero_is_placeholder);
  s->set_reshape_dims(dims);
  return s->get_output(0);
}

Tensor* Importer::transpose(Tensor* x, const std::vector<int>& perm) {
  auto* s = net_.add_shuffle(x);
  Permutation p;
  for (std::size_t i = 0; i < perm.size(); ++i) p.order[i] = perm[i];
  s->set_first_transpose(p);
  return s->get_output(0);
}

Tensor* Importer::prepend_ones(Tensor* x, int n) {
  if (n <= 0) return x;
  const int r = x->dims().rank();
  auto* s = net_.add_shuffle(x);
  if (x->dims().all_known()) {
    std::vector<std::int64_t> d(static_cast<std::size_t>(n), 1);
    for (int i = 0; i < r; ++i) d.push_back(x->dims()[i]);
    s->set_zero_is_placeholder(false);
    s->set_reshape_dims(dims_of(d));
    return s->get_output(0);
  }
  // Unknown dims: [dims..., 1 x n] (0 copies the input's dim i at position i), then the ones
  // rotated to the front.
  std::vector<std::int64_t> d(static_cast<std::size_t>(r), 0);
  for (int i = 0; i < n; ++i) d.push_back(1);
  s->set_zero_is_placeholder(true);
  s->set_reshape_dims(dims_of(d));
  Permutation p;
  for (int i = 0; i < n; ++i) p.order[static_cast<std::size_t>(i)] = r + i;
  for (int i = 0; i < r; ++i) p.order[static_cast<std::size_t>(n + i)] = i;
  s->set_second_transpose(p);
  return s->get_output(0);
}

void Importer::align_ranks(Tensor*& a, Tensor*& b) {
  const int ra = a->dims().rank(), rb = b->dims().rank();
  if (ra < rb) a = prepend_ones(a, rb - ra);
  if (rb < ra) b = prepend_ones(b, ra - rb);
}

Tensor* Importer::elementwise(Tensor* a, Tensor* b, ElementWiseOperation op) {
  align_ranks(a, b);
  return net_.add_elementwise(a, b, op)->get_output(0);
}

Tensor* Importer::unary(Tensor* x, UnaryOperation op) { return net_.add_unary(x, op)->get_output(0); }

Tensor* Importer::activation(Tensor* x, ActivationType type, float alpha, float beta) {
  auto* a = net_.add_activation(x, type);
  a->set_alpha(alpha);
  a->set_beta(beta);
  return a->get_output(0);
}

Tensor* Importer::cast(Tensor* x, DataType to) {
  if (x->type() == to) return x;
  return net_.add_cast(x, to)->get_output(0);
}

Tensor* Importer::identity(Tensor* x) { return net_.add_identity(x)->get_output(0); }

Tensor* Importer::broadcast_to(Tensor* x, const Dims& dims) {
  if (x->dims() == dims) return x;
  const int r = dims.rank();
  std::vector<std::int64_t> zero(static_cast<std::size_t>(r), 0), one(static_cast<std::size_t>(r), 1);
  auto* s = net_.add_slice(x, dims_of(zero), dims, dims_of(one));
  s->set(SliceParams{s->get().start, s->get().size, s->get().stride, SampleMode::kWRAP, 0});
  return s->get_output(0);
}

Tensor* Importer::broadcast_to(Tensor* x, Tensor* shape) {
  require_shape_computable(shape, "the shape");
  const int r = x->dims().rank();
  std::vector<std::int64_t> zero(static_cast<std::size_t>(r), 0), one(static_cast<std::size_t>(r), 1);
  // The size is the shape tensor's (ones until it is set).
  auto* s = net_.add_slice(x, dims_of(zero), dims_of(one),
                           dims_of(one));
  s->set(SliceParams{s->get().start, s->get().size, s->get().stride, SampleMode::kWRAP, 0});
  net_.set_layer_input(s, kSliceSize, shape);
  return s->get_output(0);
}

// ---- node context ---------------------------------------------------------------------------

Tensor* NodeContext::input(int i) const {
  if (!has_input(i)) fail(OnnxErrorCode::kINVALID_NODE, "input " + std::to_string(i) + " is missing");
  return im_.tensor(node_.input(i));
}

std::optional<Known> NodeContext::input_value(int i) const {
  if (!has_input(i)) return std::nullopt;
  return im_.value(input(i));
}

Known NodeContext::known_input(int i, std::string_view what) const {
  auto k = input_value(i);
  if (!k)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC,
         "input " + std::to_string(i) + " ('" + (has_input(i) ? node_.input(i) : std::string()) + "', the " + std::string(what) +
             ") must be known when the model is parsed (an initializer, a Constant, or computed from them and from "
             "static shapes); tensoracle does not take it as a run-time tensor");
  return *k;
}

void NodeContext::output(int i, Tensor* t) {
  if (i >= node_.output_size() || node_.output(i).empty()) return;
  im_.bind(node_.output(i), t);
}

const pb::AttributeProto* NodeContext::find_attr(std::string_view name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

namespace {
[[noreturn]] void attr_type(std::string_view name, const char* want) {
  fail(OnnxErrorCode::kINVALID_NODE, "attribute '" + std::string(name) + "' is not " + want);
}
}  // namespace

std::int64_t NodeContext::attr_int(std::string_view name, std::int64_t fallback) const {
  const auto* a = find_attr(name);
  if (!a) return fallback;
  if (!a->has_i() && a->type() != pb::AttributeProto::INT) attr_type(name, "an int");
  return a->i();
}

float NodeContext::attr_float(std::string_view name, float fallback) const {
  const auto* a = find_attr(name);
  if (!a) return fallback;
  if (!a->has_f() && a->type() != pb::AttributeProto::FLOAT) {
    if (a->has_i()) return static_cast<float>(a->i());
    attr_type(name, "a float");
  }
  return a->f();
}

std::string NodeContext::attr_string(std::string_view name, std::string fallback) const {
  const auto* a = find_attr(name);
  if (!a) return fallback;
  if (!a->has_s() && a->type() != pb::AttributeProto::STRING) attr_type(name, "a string");
  return a->s();
}

std::vector<std::int64_t> NodeContext::attr_ints(std::string_view name, std::vector<std::int64_t> fallback) const {
  const auto* a = find_attr(name);
  if (!a) return fallback;
  if (a->ints_size() == 0 && a->type() != pb::AttributeProto::INTS) {
    if (a->has_i()) return {a->i()};
    attr_type(name, "a list of ints");
  }
  return {a->ints().begin(), a->ints().end()};
}

std::vector<float> NodeContext::attr_floats(std::string_view name, std::vector<float> fallback) const {
  const auto* a = find_attr(name);
  if (!a) return fallback;
  if (a->floats_size() == 0 && a->type() != pb::AttributeProto::FLOATS) attr_type(name, "a list of floats");
  return {a->floats().begin(), a->floats().end()};
}

const pb::TensorProto* NodeContext::attr_tensor(std::string_view name) const {
  const auto* a = find_attr(name);
  if (!a) return nullptr;
  if (!a->has_t()) attr_type(name, "a tensor");
  return &a->t();
}

void NodeContext::require_attr_int(std::string_view name, std::int64_t expected, std::int64_t fallback,
                                   std::string_view why) const {
  const auto v = attr_int(name, fallback);
  if (v != expected)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR,
         "attribute " + std::string(name) + " = " + std::to_string(v) + " is not supported (" + std::string(why) + ")");
}

int NodeContext::axis(std::int64_t a, int rank, std::string_view what) const {
  if (a < -rank || a >= rank)
    fail(OnnxErrorCode::kINVALID_NODE, std::string(what) + " " + std::to_string(a) + " is outside [" + std::to_string(-rank) +
                                           ", " + std::to_string(rank) + ") for an input of rank " + std::to_string(rank));
  return static_cast<int>(a < 0 ? a + rank : a);
}

std::uint32_t NodeContext::axes_mask(const std::vector<std::int64_t>& axes, int rank) const {
  std::uint32_t m = 0;
  for (auto a : axes) {
    const int ax = axis(a, rank, "axis");
    if (m & (1u << ax)) fail(OnnxErrorCode::kINVALID_NODE, "axis " + std::to_string(a) + " is listed twice");
    m |= 1u << ax;
  }
  return m;
}

}  // namespace tensoracle::onnx
