// OnnxParser (tensoracle/onnx_parser.h): reads the ModelProto, checks its opsets, creates the
// network's inputs, the initializers' constants and its outputs, and converts each node with
// the converter of its operator (onnx/importer.h). A parse first runs into a scratch network,
// so that a failure leaves the caller's network as it was.
#include "tensoracle/onnx_parser.h"

#include <climits>
#include <set>

#include "core/mapped_file.h"
#include "core/text.h"
#include "onnx/importer.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"

namespace tensoracle {

namespace {

// The newest opset whose operators' definitions the converters follow; a model may import older
// opsets down to kMinOpset.
constexpr int kMaxOpset = 28;
constexpr int kMinOpset = 7;

struct Failure {
  OnnxParserError error;
};

// `s` as valid UTF-8 for a message: a byte that is not part of valid UTF-8 becomes \xNN (a
// model's names are untrusted bytes; Python cannot take invalid UTF-8 as str).
std::string printable(const std::string& s) {
  if (core::valid_utf8(s)) return s;
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len > 0 && i + len <= s.size() && core::valid_utf8(std::string_view(s).substr(i, len))) {
      out.append(s, i, len);
      i += len - 1;
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Names in a model must be UTF-8 (ONNX's strings are); one that is not refuses the model.
void require_utf8(const std::string& name, const char* what) {
  if (!core::valid_utf8(name))
    throw Failure{[&] {
      OnnxParserError e;
      e.code = OnnxErrorCode::kINVALID_GRAPH;
      e.description = std::string(what) + " '" + printable(name) + "' is not valid UTF-8";
      return e;
    }()};
}

OnnxParserError make_error(OnnxErrorCode code, std::string what) {
  OnnxParserError e;
  e.code = code;
  e.description = std::move(what);
  return e;
}

[[noreturn]] void graph_error(OnnxErrorCode code, const std::string& what) { throw Failure{make_error(code, what)}; }

// Imports `model`'s graph into `net`. Throws Failure.
void import_model(Network& net, const std::shared_ptr<const onnx::pb::ModelProto>& model, int opset,
                  const std::string& folder) {
  using onnx::fail;
  const auto& g = model->graph();
  for (const auto& t : g.initializer()) require_utf8(t.name(), "initializer");
  for (const auto& v : g.input()) require_utf8(v.name(), "graph input");
  for (const auto& v : g.output()) require_utf8(v.name(), "graph output");
  for (const auto& n : g.node()) {
    require_utf8(n.name(), "node name");
    require_utf8(n.op_type(), "operator");
    for (const auto& t : n.input()) require_utf8(t, "tensor name");
    for (const auto& t : n.output()) require_utf8(t, "tensor name");
  }
  onnx::Importer im(net, opset, model);

  // Initializers: constants whose weights borrow the model's bytes.
  std::set<std::string> initialized;
  for (const auto& init : g.initializer()) {
    onnx::Known k;
    try {
      k = onnx::read_tensor(init, model, folder);
    } catch (const onnx::NodeError& e) {
      graph_error(e.code, std::string("initializer: ") + e.what());
    }
    if (init.name().empty()) graph_error(OnnxErrorCode::kINVALID_GRAPH, "an initializer has no name");
    if (!initialized.insert(init.name()).second)
      graph_error(OnnxErrorCode::kINVALID_GRAPH, "initializer '" + init.name() + "' is given twice");
    try {
      auto* c = net.add_constant(k.dims, k.weights);
      c->set_name(init.name());
      im.bind(init.name(), c->get_output(0));
    } catch (const Error& e) {
      graph_error(OnnxErrorCode::kINVALID_VALUE, "initializer '" + init.name() + "': " + e.what());
    }
  }
  if (g.sparse_initializer_size() > 0)
    graph_error(OnnxErrorCode::kUNSUPPORTED_GRAPH, "sparse initializers are not supported");

  // Inputs (an input with an initializer of its name is a constant: ONNX's default value).
  for (const auto& in : g.input()) {
    if (initialized.count(in.name())) continue;
    // An input the importer cannot take is reported at the first node that reads it.
    auto graph_error = [&](OnnxErrorCode code, const std::string& what) {
      Failure f{make_error(code, what)};
      for (int index = 0; index < g.node_size() && f.error.node < 0; ++index)
        for (const auto& name : g.node(index).input())
          if (name == in.name() && !g.node(index).op_type().empty()) {
            f.error.node = index;
            f.error.node_name = g.node(index).name();
            f.error.node_operator = g.node(index).op_type();
            f.error.description = g.node(index).op_type() + ": " + what;
            break;
          }
      if (f.error.node < 0) f.error.description += " (no node reads it)";
      throw f;
    };
    const std::string what = "graph input '" + in.name() + "'";
    if (in.name().empty()) graph_error(OnnxErrorCode::kINVALID_GRAPH, "a graph input has no name");
    if (!in.type().has_tensor_type())
      graph_error(OnnxErrorCode::kUNSUPPORTED_GRAPH, what + " is not a tensor (sequences, maps and optionals are not supported)");
    const auto& tt = in.type().tensor_type();
    auto type = onnx::data_type_of(tt.elem_type());
    if (!type)
      graph_error(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE,
                  what + " has ONNX type " + onnx::onnx_type_name(tt.elem_type()) + ", which tensoracle has no type for");
    if (!tt.has_shape()) graph_error(OnnxErrorCode::kUNSUPPORTED_GRAPH, what + " has no shape (its rank must be known)");
    if (tt.shape().dim_size() > Dims::kMaxRank)
      graph_error(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, what + " has rank " + std::to_string(tt.shape().dim_size()) +
                                                              "; at most " + std::to_string(Dims::kMaxRank) + " is supported");
    std::vector<std::int64_t> d;
    for (const auto& dim : tt.shape().dim()) {
      if (dim.has_dim_value() && dim.dim_value() < 0)
        graph_error(OnnxErrorCode::kINVALID_GRAPH, what + " has a negative dimension " + std::to_string(dim.dim_value()));
      if (dim.has_dim_value() && dim.dim_value() > (std::int64_t{1} << 40))
        graph_error(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, what + " has a dimension of " + std::to_string(dim.dim_value()) +
                                                                ", above 2^40");
      d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    }
    try {
      im.bind(in.name(), net.add_input(in.name(), *type, Dims(std::span<const std::int64_t>(d))));
    } catch (const Error& e) {
      graph_error(OnnxErrorCode::kINVALID_GRAPH, e.what());
    } catch (const onnx::NodeError& e) {
      graph_error(e.code, e.what());
    }
  }

  // Nodes, in order (ONNX requires a topological order).
  std::set<std::string> layer_names;
  for (int i = 0; i < net.num_layers(); ++i) layer_names.insert(net.get_layer(i)->name());
  for (int index = 0; index < g.node_size(); ++index) {
    const auto& node = g.node(index);
    auto node_failure = [&](OnnxErrorCode code, const std::string& what) {
      // The description names the operator too: it is often shown alone.
      Failure f{make_error(code, what.rfind(node.op_type(), 0) == 0 ? what : node.op_type() + ": " + what)};
      f.error.node = index;
      f.error.node_name = node.name();
      f.error.node_operator = node.op_type();
      throw f;
    };
    if (node.op_type().empty()) node_failure(OnnxErrorCode::kINVALID_NODE, "the node has no operator (op_type is empty)");
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      node_failure(OnnxErrorCode::kUNSUPPORTED_NODE, "operator " + node.op_type() + " of domain '" + node.domain() +
                                                         "' is not supported (only ONNX's default domain is)");
    const auto* convert = onnx::find_converter(node.op_type());
    if (convert == nullptr)
      node_failure(OnnxErrorCode::kUNSUPPORTED_NODE, "operator " + node.op_type() + " (opset " + std::to_string(opset) +
                                                         ") is not supported");
    const int before = net.num_layers();
    try {
      onnx::NodeContext ctx(im, node);
      (*convert)(ctx);
      for (int o = 0; o < node.output_size(); ++o)
        if (!node.output(o).empty() && !im.defined(node.output(o)))
          onnx::fail(OnnxErrorCode::kUNSUPPORTED_NODE, "output " + std::to_string(o) + " ('" + node.output(o) +
                                                           "') of " + node.op_type() + " is not supported");
    } catch (const onnx::NodeError& e) {
      node_failure(e.code, e.what());
    } catch (const UnsupportedError& e) {
      node_failure(OnnxErrorCode::kUNSUPPORTED_NODE, e.what());
    } catch (const Error& e) {
      node_failure(OnnxErrorCode::kINVALID_NODE, e.what());
    } catch (const std::bad_alloc&) {
      node_failure(OnnxErrorCode::kMEM_ALLOC_FAILED, "out of memory");
    }
    // Name the node's layers after it (unique: names are how inspect and errors point at them).
    const std::string base = node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
    for (int l = before, k = 0; l < net.num_layers(); ++l, ++k) {
      std::string name = k == 0 ? base : base + "/" + std::to_string(k);
      while (!layer_names.insert(name).second) name += "_" + std::to_string(index);
      net.get_layer(l)->set_name(name);
    }
  }

  // Outputs: ONNX's names; a graph input, a constant or a tensor listed twice goes through an
  // identity so that each output is a tensor of its own.
  std::set<const Tensor*> marked;
  for (const auto& out : g.output()) {
    Tensor* t = nullptr;
    try {
      t = im.tensor(out.name());
    } catch (const onnx::NodeError& e) {
      graph_error(OnnxErrorCode::kINVALID_GRAPH, "graph output '" + out.name() + "': " + e.what());
    }
    try {
      const bool own = !t->is_network_input() && !marked.count(t) && t->producer() != nullptr &&
                       t->producer()->type() != LayerType::kCONSTANT;
      if (!own) t = net.add_identity(t)->get_output(0);
      if (out.type().has_tensor_type()) {
        auto declared = onnx::data_type_of(out.type().tensor_type().elem_type());
        if (declared && *declared != t->type()) t = net.add_cast(t, *declared)->get_output(0);
      }
      t->set_name(out.name());
      net.mark_output(t);
      marked.insert(t);
    } catch (const Error& e) {
      graph_error(OnnxErrorCode::kINVALID_GRAPH, "graph output '" + out.name() + "': " + e.what());
    }
  }
  if (g.output_size() == 0) graph_error(OnnxErrorCode::kINVALID_GRAPH, "the graph has no outputs");
}

}  // namespace

std::string_view onnx_error_code_name(OnnxErrorCode code) noexcept {
  switch (code) {
    case OnnxErrorCode::kSUCCESS: return "SUCCESS";
    case OnnxErrorCode::kINTERNAL_ERROR: return "INTERNAL_ERROR";
    case OnnxErrorCode::kMEM_ALLOC_FAILED: return "MEM_ALLOC_FAILED";
    case OnnxErrorCode::kMODEL_DESERIALIZE_FAILED: return "MODEL_DESERIALIZE_FAILED";
    case OnnxErrorCode::kINVALID_VALUE: return "INVALID_VALUE";
    case OnnxErrorCode::kINVALID_GRAPH: return "INVALID_GRAPH";
    case OnnxErrorCode::kINVALID_NODE: return "INVALID_NODE";
    case OnnxErrorCode::kUNSUPPORTED_GRAPH: return "UNSUPPORTED_GRAPH";
    case OnnxErrorCode::kUNSUPPORTED_NODE: return "UNSUPPORTED_NODE";
    case OnnxErrorCode::kUNSUPPORTED_NODE_ATTR: return "UNSUPPORTED_NODE_ATTR";
    case OnnxErrorCode::kUNSUPPORTED_NODE_INPUT: return "UNSUPPORTED_NODE_INPUT";
    case OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE: return "UNSUPPORTED_NODE_DATATYPE";
    case OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC: return "UNSUPPORTED_NODE_DYNAMIC";
    case OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE: return "UNSUPPORTED_NODE_SHAPE";
    case OnnxErrorCode::kREFIT_FAILED: return "REFIT_FAILED";
  }
  return "UNKNOWN";
}

std::string OnnxParserError::str() const {
  std::string s = file.empty() ? std::string("[onnx] ") : "[onnx] " + file + ": ";
  if (node >= 0) {
    s += "node " + std::to_string(node);
    if (!node_name.empty()) s += " '" + node_name + "'";
    s += " (" + node_operator;
    if (opset > 0) s += ", opset " + std::to_string(opset);
    s += "): ";
  }
  return s + std::string(onnx_error_code_name(code)) + ": " + description;
}

OnnxParser::OnnxParser(Network& network) : network_(network) {}
OnnxParser::~OnnxParser() = default;

const OnnxParserError& OnnxParser::get_error(int i) const {
  if (i < 0 || i >= num_errors())
    throw InvalidArgument("[onnx] get_error(" + std::to_string(i) + "): there are " + std::to_string(num_errors()) + " errors");
  return errors_[static_cast<std::size_t>(i)];
}

bool OnnxParser::parse(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  const bool ok = parse_model(bytes, path);
  for (auto& e : errors_) {
    e.description = printable(e.description);
    e.node_name = printable(e.node_name);
    e.node_operator = printable(e.node_operator);
    e.file = printable(e.file);
  }
  return ok;
}

bool OnnxParser::parse_model(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  errors_.clear();
  const std::string file = path.string();
  auto error = [&](OnnxErrorCode code, const std::string& what, int opset = 0) {
    OnnxParserError e = make_error(code, what);
    e.file = file;
    e.opset = opset;
    errors_.push_back(std::move(e));
    return false;
  };
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    return error(OnnxErrorCode::kMODEL_DESERIALIZE_FAILED,
                 "the model is " + std::to_string(bytes.size()) + " bytes; a protobuf message holds at most 2 GiB (keep "
                 "large weights in external data files)");
  auto model = std::make_shared<onnx::pb::ModelProto>();
  try {
    if (!model->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      return error(OnnxErrorCode::kMODEL_DESERIALIZE_FAILED,
                   "the bytes are not an ONNX model (protobuf could not parse a ModelProto from them)");
  } catch (const std::bad_alloc&) {
    return error(OnnxErrorCode::kMEM_ALLOC_FAILED, "out of memory while reading the model");
  }
  if (!model->has_graph()) return error(OnnxErrorCode::kMODEL_DESERIALIZE_FAILED, "the model has no graph");
  int opset = -1;
  for (const auto& imp : model->opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx") opset = static_cast<int>(std::min<std::int64_t>(imp.version(), INT_MAX));
  if (opset < 0 && model->ir_version() >= 3) {
    // Models of other domains only (ai.onnx.ml, preview ops): name the first such node.
    for (int index = 0; index < model->graph().node_size(); ++index) {
      const auto& node = model->graph().node(index);
      if (node.domain().empty() || node.domain() == "ai.onnx") continue;
      if (node.op_type().empty()) error(OnnxErrorCode::kINVALID_NODE, "the node has no operator (op_type is empty)");
      else
        error(OnnxErrorCode::kUNSUPPORTED_NODE, node.op_type() + ": operator " + node.op_type() + " of domain '" +
                                                    node.domain() + "' is not supported (only ONNX's default domain is)");
      errors_.back().node = index;
      errors_.back().node_name = node.name();
      errors_.back().node_operator = node.op_type();
      return false;
    }
    return error(OnnxErrorCode::kINVALID_GRAPH, "the model imports no opset of ONNX's default domain");
  }
  if (opset < 0) opset = 1;
  // An opset outside the range is reported at the first node (the operator read under it).
  auto at_first_node = [&](bool) {
    if (model->graph().node_size() == 0 || model->graph().node(0).op_type().empty()) return false;
    const auto& node = model->graph().node(0);
    auto& e = errors_.back();
    e.node = 0;
    e.node_name = node.name();
    e.node_operator = node.op_type();
    e.description = node.op_type() + ": " + e.description;
    return false;
  };
  if (opset > kMaxOpset)
    return at_first_node(error(OnnxErrorCode::kUNSUPPORTED_GRAPH, "the model imports opset " + std::to_string(opset) +
                                                        " of ONNX's default domain; tensoracle reads opsets " +
                                                        std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset)));
  if (opset < kMinOpset)
    return at_first_node(error(OnnxErrorCode::kUNSUPPORTED_GRAPH, "the model imports opset " + std::to_string(opset) +
                                                        "; tensoracle reads opsets " + std::to_string(kMinOpset) + " to " +
                                                        std::to_string(kMaxOpset) + " (convert it with onnx.version_converter)"));
  const std::string folder = path.empty() ? std::string() : (path.has_parent_path() ? path.parent_path().string() : ".");
  std::shared_ptr<const onnx::pb::ModelProto> shared = model;
  for (int pass = 0; pass < 2; ++pass) {
    try {
      if (pass == 0) {
        auto scratch = std::make_shared<Network>();
        import_model(*scratch, shared, opset, folder);
      } else {
        import_model(network_, shared, opset, folder);
      }
    } catch (Failure& f) {
      f.error.file = file;
      f.error.opset = opset;
      errors_.push_back(std::move(f.error));
      return false;
    } catch (const std::bad_alloc&) {
      return error(OnnxErrorCode::kMEM_ALLOC_FAILED, "out of memory while importing the model", opset);
    } catch (const std::exception& e) {
      return error(OnnxErrorCode::kINTERNAL_ERROR, e.what(), opset);
    }
  }
  return true;
}

bool OnnxParser::parse_from_file(const std::filesystem::path& path) {
  errors_.clear();
  try {
    core::MappedFile file(path, false, "[onnx]");
    return parse(file.bytes(), path);
  } catch (const Error& e) {
    OnnxParserError err = make_error(OnnxErrorCode::kMODEL_DESERIALIZE_FAILED, e.what());
    err.file = path.string();
    errors_.push_back(std::move(err));
    return false;
  }
}

std::function<void(Network&)> onnx_graph(std::filesystem::path model) {
  return [model = std::move(model)](Network& net) {
    OnnxParser parser(net);
    if (parser.parse_from_file(model)) return;
    std::string all;
    for (int i = 0; i < parser.num_errors(); ++i) all += (i ? "; " : "") + parser.get_error(i).str();
    throw InvalidArgument("[onnx] " + model.string() + " could not be imported: " + all);
  };
}

std::vector<std::filesystem::path> onnx_model_files(const std::filesystem::path& model) {
  core::MappedFile file(model, false, "[onnx]");
  const auto bytes = file.bytes();
  auto proto = std::make_shared<onnx::pb::ModelProto>();
  if (bytes.size() > static_cast<std::size_t>(INT_MAX) || !proto->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw FormatError("[onnx] " + model.string() + ": not an ONNX model (protobuf could not parse a ModelProto from it)");
  std::vector<std::filesystem::path> files{model};
  const std::string folder = model.has_parent_path() ? model.parent_path().string() : ".";
  std::set<std::string> seen;
  for (const auto& t : proto->graph().initializer()) {
    if (t.data_location() != onnx::pb::TensorProto::EXTERNAL) continue;
    try {
      auto path = onnx::external_data_path(t, folder);
      if (seen.insert(path.string()).second) files.push_back(path);
    } catch (const onnx::NodeError& e) {
      throw InvalidArgument("[onnx] " + model.string() + ": " + e.what());
    }
  }
  return files;
}

bool OnnxParser::supports_operator(std::string_view op_type) noexcept { return onnx::find_converter(op_type) != nullptr; }

std::vector<std::string> OnnxParser::supported_operators() { return onnx::converter_names(); }

int OnnxParser::max_opset() noexcept { return kMaxOpset; }

}  // namespace tensoracle
