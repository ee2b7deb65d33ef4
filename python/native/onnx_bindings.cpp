// ONNX import: OnnxParser, ParserError and ErrorCode (TensorRT's nvonnxparser names).
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "bindings.h"
#include "tensoracle/errors.h"
#include "tensoracle/onnx_parser.h"

namespace nb = nanobind;

namespace tensoracle::python {

namespace {

// The bytes of any object with the buffer protocol (bytes, bytearray, memoryview, NumPy).
struct BufferView {
  explicit BufferView(nb::handle obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      throw InvalidArgument("[onnx] parse: the model must be bytes or another object with the buffer protocol, not " +
                            std::string(nb::type_name(obj.type()).c_str()));
    }
  }
  ~BufferView() { PyBuffer_Release(&view); }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view.buf), static_cast<std::size_t>(view.len)};
  }
  Py_buffer view{};
};

}  // namespace

void bind_onnx(nb::module_& m) {
  nb::enum_<OnnxErrorCode>(m, "ErrorCode", nb::is_arithmetic(), "Why an ONNX parse failed (TensorRT's nvonnxparser ErrorCode)")
      .value("SUCCESS", OnnxErrorCode::kSUCCESS)
      .value("INTERNAL_ERROR", OnnxErrorCode::kINTERNAL_ERROR)
      .value("MEM_ALLOC_FAILED", OnnxErrorCode::kMEM_ALLOC_FAILED)
      .value("MODEL_DESERIALIZE_FAILED", OnnxErrorCode::kMODEL_DESERIALIZE_FAILED)
      .value("INVALID_VALUE", OnnxErrorCode::kINVALID_VALUE)
      .value("INVALID_GRAPH", OnnxErrorCode::kINVALID_GRAPH)
      .value("INVALID_NODE", OnnxErrorCode::kINVALID_NODE)
      .value("UNSUPPORTED_GRAPH", OnnxErrorCode::kUNSUPPORTED_GRAPH)
      .value("UNSUPPORTED_NODE", OnnxErrorCode::kUNSUPPORTED_NODE)
      .value("UNSUPPORTED_NODE_ATTR", OnnxErrorCode::kUNSUPPORTED_NODE_ATTR)
      .value("UNSUPPORTED_NODE_INPUT", OnnxErrorCode::kUNSUPPORTED_NODE_INPUT)
      .value("UNSUPPORTED_NODE_DATATYPE", OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE)
      .value("UNSUPPORTED_NODE_DYNAMIC", OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC)
      .value("UNSUPPORTED_NODE_SHAPE", OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE)
      .value("REFIT_FAILED", OnnxErrorCode::kREFIT_FAILED);

  // TensorRT's IParserError: accessors are methods.
  nb::class_<OnnxParserError>(m, "ParserError", "One reason an ONNX parse failed")
      .def("code", [](const OnnxParserError& e) { return e.code; })
      .def("desc", [](const OnnxParserError& e) { return e.description; })
      .def("file", [](const OnnxParserError& e) { return e.file; })
      .def("func", [](const OnnxParserError&) { return std::string(); })
      .def("line", [](const OnnxParserError&) { return -1; })
      .def("node", [](const OnnxParserError& e) { return e.node; })
      .def("node_name", [](const OnnxParserError& e) { return e.node_name; })
      .def("node_operator", [](const OnnxParserError& e) { return e.node_operator; })
      .def("opset", [](const OnnxParserError& e) { return e.opset; })
      .def("local_function_stack", [](const OnnxParserError&) { return std::vector<std::string>(); })
      .def("local_function_stack_size", [](const OnnxParserError&) { return 0; })
      .def("__str__", &OnnxParserError::str)
      .def("__repr__", [](const OnnxParserError& e) { return "<ParserError " + e.str() + ">"; });

  nb::class_<OnnxParser>(m, "OnnxParser",
                         "Imports an ONNX model into a network (TensorRT's trt.OnnxParser(network, logger))")
      .def(
          "__init__",
          [](OnnxParser* self, Network& network, nb::handle /*logger*/) { new (self) OnnxParser(network); },
          nb::arg("network"), nb::arg("logger") = nb::none(), nb::keep_alive<1, 2>())
      .def(
          "parse",
          [](OnnxParser& p, nb::handle model, std::optional<std::filesystem::path> path) {
            BufferView view(model);
            nb::gil_scoped_release release;
            return p.parse(view.bytes(), path.value_or(std::filesystem::path()));
          },
          nb::arg("model"), nb::arg("path") = nb::none(),
          "Parses a serialized ModelProto; `path` (the model file's) finds its external data. False on failure, with "
          "the reasons in get_error(i); the network is then unchanged")
      .def(
          "parse_from_file",
          [](OnnxParser& p, const std::filesystem::path& path) {
            nb::gil_scoped_release release;
            return p.parse_from_file(path);
          },
          nb::arg("model"))
      .def_prop_ro("num_errors", &OnnxParser::num_errors)
      .def("get_error", &OnnxParser::get_error, nb::arg("index"), nb::rv_policy::copy)
      .def("clear_errors", &OnnxParser::clear_errors)
      .def_static("supports_operator", [](const std::string& op) { return OnnxParser::supports_operator(op); },
                  nb::arg("op_name"))
      .def_static("supported_operators", &OnnxParser::supported_operators)
      .def_static("max_opset", &OnnxParser::max_opset);
}

}  // namespace tensoracle::python
