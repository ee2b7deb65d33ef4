// tensoracle/onnx_parser.h — import an ONNX model into a Network (TensorRT's nvonnxparser).
//
//   tensoracle::Network net;
//   tensoracle::OnnxParser parser(net);
//   if (!parser.parse_from_file("model.onnx")) {
//     for (int i = 0; i < parser.num_errors(); ++i) std::cerr << parser.get_error(i).str() << "\n";
//     return 1;
//   }
//   // net now holds the model's inputs (ONNX's dims; -1 where a dim is symbolic), its layers and
//   // its outputs; build it with build_serialized_network (builder.h).
//
// The model is read with protobuf (ONNX's schema, onnx.proto) into the same layers a graph
// function adds. Initializers and Constant nodes become constant layers whose weights borrow
// the model's bytes (or a memory mapping of its external data files) rather than copying them;
// the network keeps what it borrows alive. Values the importer can compute while it parses
// (initializers, Constant nodes, Shape of a tensor whose dims are known, and what is computed
// from them: the typical Shape → Gather → Concat → Reshape chains of exported models) are folded
// on the host, so that parameters ONNX passes as tensors (Reshape's shape, Slice's bounds,
// Squeeze's axes, Pad's pads, ...) become static where they can.
//
// A parse is all or nothing: when it fails (an operator, attribute, type or dynamic input that
// is not supported, or a malformed model) the network is left as it was, and the errors say why,
// each naming the node, its operator and the opset. Never throws for bad model bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tensoracle {

class Network;

// TensorRT's nvonnxparser::ErrorCode names and values.
enum class OnnxErrorCode : std::int32_t {
  kSUCCESS = 0,
  kINTERNAL_ERROR = 1,
  kMEM_ALLOC_FAILED = 2,
  kMODEL_DESERIALIZE_FAILED = 3,
  kINVALID_VALUE = 4,
  kINVALID_GRAPH = 5,
  kINVALID_NODE = 6,
  kUNSUPPORTED_GRAPH = 7,
  kUNSUPPORTED_NODE = 8,
  kUNSUPPORTED_NODE_ATTR = 9,
  kUNSUPPORTED_NODE_INPUT = 10,
  kUNSUPPORTED_NODE_DATATYPE = 11,
  kUNSUPPORTED_NODE_DYNAMIC = 12,
  kUNSUPPORTED_NODE_SHAPE = 13,
  kREFIT_FAILED = 14,
};
std::string_view onnx_error_code_name(OnnxErrorCode code) noexcept;  // "UNSUPPORTED_NODE", ...

// One reason a parse failed (TensorRT's IParserError).
struct OnnxParserError {
  OnnxErrorCode code = OnnxErrorCode::kSUCCESS;
  std::string description;
  std::int64_t node = -1;     // the node's index in the graph; -1 when the error is not a node's
  std::string node_name;      // the node's name ("" when it has none or the error is not a node's)
  std::string node_operator;  // its op type ("Conv"), or ""
  std::int64_t opset = 0;     // the model's default-domain opset, when it was read
  std::string file;           // the model's path when it was given, else ""

  // "model.onnx: node 12 'conv1' (Conv, opset 17): UNSUPPORTED_NODE_ATTR: ..." — one line.
  std::string str() const;
};

class OnnxParser {
 public:
  // The parser adds to `network`, which must outlive it.
  explicit OnnxParser(Network& network);
  ~OnnxParser();
  OnnxParser(const OnnxParser&) = delete;
  OnnxParser& operator=(const OnnxParser&) = delete;

  // Parses a serialized ModelProto. `path`, when given, is the model file's path: external data
  // files are looked up beside it (and a location that leaves its folder is refused), and error
  // messages name it. Without a path a model with external data is refused. Returns true on
  // success; false leaves the network unchanged and the reasons in get_error(). Each parse
  // replaces the errors of the one before.
  bool parse(std::span<const std::byte> model, const std::filesystem::path& path = {});
  bool parse_from_file(const std::filesystem::path& path);

  int num_errors() const noexcept { return static_cast<int>(errors_.size()); }
  // Throws InvalidArgument when `i` is out of range.
  const OnnxParserError& get_error(int i) const;
  void clear_errors() noexcept { errors_.clear(); }

  // Whether the importer converts ONNX operator `op_type` of the default domain (some of its
  // attributes or input types may still be refused).
  static bool supports_operator(std::string_view op_type) noexcept;
  static std::vector<std::string> supported_operators();
  // The newest default-domain opset the importer reads (older ones down to 7 are read too).
  static int max_opset() noexcept;

 private:
  bool parse_model(std::span<const std::byte> model, const std::filesystem::path& path);

  Network& network_;
  std::vector<OnnxParserError> errors_;
};

// An ONNX file as the graph of open_engine (cache.h) or build_serialized_engine (builder.h):
//
//   tensoracle::OpenOptions options;
//   options.name = "classifier";
//   options.graph_version = "1";
//   options.weights = tensoracle::onnx_model_files("model.onnx");  // the model and its data files
//   auto handle = tensoracle::open_engine(tensoracle::onnx_graph("model.onnx"), declaration, options);
//
// onnx_graph's function parses the model into the builder's network, or throws InvalidArgument
// with every parser error. onnx_model_files lists the files the engine depends on, so that their
// contents are in the cache identity: the model, then each external data file it names (checked
// as the parser checks them: in the model's folder). Throws IoError, FormatError (not a model),
// InvalidArgument (a location outside the folder).
std::function<void(Network&)> onnx_graph(std::filesystem::path model);
std::vector<std::filesystem::path> onnx_model_files(const std::filesystem::path& model);

}  // namespace tensoracle
