// The converters by operator name (onnx/importer.h): each ops_*.cpp file adds its own.
#include "onnx/importer.h"

namespace tensoracle::onnx {

namespace {

const ConverterTable& table() {
  static const ConverterTable t = [] {
    ConverterTable t;
    add_math_ops(t);
    add_tensor_ops(t);
    add_nn_ops(t);
    add_control_ops(t);
    return t;
  }();
  return t;
}

}  // namespace

const Converter* find_converter(std::string_view op_type) {
  const auto& t = table();
  auto it = t.find(op_type);
  return it == t.end() ? nullptr : &it->second;
}

std::vector<std::string> converter_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) names.push_back(name);
  return names;
}

}  // namespace tensoracle::onnx
