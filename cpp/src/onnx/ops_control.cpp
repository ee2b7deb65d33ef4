// ONNX control flow: If (a conditional, or the one branch a condition known at parse time
// picks) and Loop (a counted loop: its body once per iteration when the engine is built). Their
// subgraphs are converted node by node into the same network; names of the outer graph stay
// visible inside them, as ONNX scopes them.
#include <string>
#include <vector>

#include "core/text.h"
#include "onnx/importer.h"

namespace tensoracle::onnx {

namespace {

// Subgraphs nest (an If in a Loop's body in an If's branch...): bounded, as a hostile model may
// nest them without end.
constexpr int kMaxNesting = 16;
thread_local int nesting = 0;

struct Nested {
  Nested() {
    if (++nesting > kMaxNesting) {
      --nesting;
      fail(OnnxErrorCode::kUNSUPPORTED_GRAPH, "subgraphs nest more than " + std::to_string(kMaxNesting) + " deep");
    }
  }
  ~Nested() { --nesting; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;
};

void require_utf8(const std::string& s, const std::string& what) {
  if (!core::valid_utf8(s)) fail(OnnxErrorCode::kINVALID_GRAPH, what + " has a name that is not valid UTF-8");
}

const pb::GraphProto& graph_attr(NodeContext& c, const char* name) {
  const pb::AttributeProto* a = c.find_attr(name);
  if (a == nullptr || !a->has_g()) fail(OnnxErrorCode::kINVALID_NODE, std::string("attribute '") + name + "' (a graph) is missing");
  return a->g();
}

// Converts the nodes of subgraph `g` (`what` names it in messages); its initializers become
// constants. Returns its outputs' tensors.
std::vector<Tensor*> convert_subgraph(NodeContext& c, const pb::GraphProto& g, const std::string& what) {
  Nested guard;
  Importer& im = c.im();
  for (const auto& init : g.initializer()) {
    require_utf8(init.name(), what + " initializer");
    Known k = read_tensor(init, im.owner(), "");
    auto* layer = c.net().add_constant(k.dims, k.weights);
    im.bind(init.name(), layer->get_output(0));
  }
  if (g.sparse_initializer_size() > 0) fail(OnnxErrorCode::kUNSUPPORTED_GRAPH, what + ": sparse initializers are not supported");
  for (int index = 0; index < g.node_size(); ++index) {
    const auto& node = g.node(index);
    require_utf8(node.name(), what + " node");
    require_utf8(node.op_type(), what + " node " + std::to_string(index));
    for (const auto& t : node.input()) require_utf8(t, what + " node " + std::to_string(index));
    for (const auto& t : node.output()) require_utf8(t, what + " node " + std::to_string(index));
    const std::string where = what + " node " + std::to_string(index) + (node.name().empty() ? "" : " '" + node.name() + "'") +
                              " (" + node.op_type() + ")";
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      fail(OnnxErrorCode::kUNSUPPORTED_NODE, where + ": domain '" + node.domain() + "' is not supported");
    const Converter* convert = find_converter(node.op_type());
    if (convert == nullptr)
      fail(OnnxErrorCode::kUNSUPPORTED_NODE, where + ": operator " + node.op_type() + " (opset " + std::to_string(c.opset()) +
                                                  ") is not supported");
    try {
      NodeContext inner(im, node);
      (*convert)(inner);
    } catch (const NodeError& e) {
      fail(e.code, where + ": " + e.what());
    }
    for (int o = 0; o < node.output_size(); ++o)
      if (!node.output(o).empty() && !im.defined(node.output(o)))
        fail(OnnxErrorCode::kUNSUPPORTED_NODE, where + ": output " + std::to_string(o) + " is not supported");
  }
  std::vector<Tensor*> out;
  for (const auto& o : g.output()) out.push_back(im.tensor(o.name()));
  return out;
}

// A 0-D view of a one-element tensor (ONNX writes conditions and counts as [1] too).
Tensor* scalar_of(NodeContext& c, Tensor* t, const char* what) {
  if (t->dims().rank() == 0) return t;
  if (t->dims().volume() != 1) fail(OnnxErrorCode::kINVALID_NODE, std::string(what) + " " + t->dims().str() + " must hold one value");
  return c.im().reshape(t, Dims{});
}

void if_op(NodeContext& c) {
  const auto& then_g = graph_attr(c, "then_branch");
  const auto& else_g = graph_attr(c, "else_branch");
  if (then_g.output_size() != c.num_outputs() || else_g.output_size() != c.num_outputs())
    fail(OnnxErrorCode::kINVALID_NODE, "the branches give " + std::to_string(then_g.output_size()) + " and " +
                                           std::to_string(else_g.output_size()) + " outputs; the node has " +
                                           std::to_string(c.num_outputs()));
  Tensor* cond = scalar_of(c, c.input(0), "the condition");
  if (cond->type() != DataType::kBOOL) fail(OnnxErrorCode::kINVALID_NODE, "the condition must be bool");
  if (auto known = c.im().value(cond)) {
    // Known when parsing: only the branch it picks exists.
    const bool take = known->ints().at(0) != 0;
    auto outs = convert_subgraph(c, take ? then_g : else_g, take ? "then_branch" : "else_branch");
    for (int k = 0; k < c.num_outputs(); ++k) c.output(k, c.im().identity(outs[static_cast<std::size_t>(k)]));
    return;
  }
  IfConditional* branch = c.net().add_if_conditional();
  branch->set_condition(cond);
  auto then_out = convert_subgraph(c, then_g, "then_branch");
  auto else_out = convert_subgraph(c, else_g, "else_branch");
  for (int k = 0; k < c.num_outputs(); ++k)
    c.output(k, branch->add_output(then_out[static_cast<std::size_t>(k)], else_out[static_cast<std::size_t>(k)])->get_output(0));
}

void loop_op(NodeContext& c) {
  const auto& body = graph_attr(c, "body");
  const int carried = c.num_inputs() - 2;
  if (carried < 0 || body.input_size() != carried + 2)
    fail(OnnxErrorCode::kINVALID_NODE, "the body takes " + std::to_string(body.input_size()) + " inputs; the node gives " +
                                           std::to_string(c.num_inputs() - 2) + " loop-carried values (and M, cond)");
  const int scans = body.output_size() - 1 - carried;
  if (scans < 0 || c.num_outputs() > carried + scans)
    fail(OnnxErrorCode::kINVALID_NODE, "the body gives " + std::to_string(body.output_size()) + " outputs for " +
                                           std::to_string(carried) + " loop-carried values");
  if (!c.has_input(0))
    fail(OnnxErrorCode::kUNSUPPORTED_NODE, "a Loop without a trip count (M) is a while loop, which tensoracle does not build");
  Importer& im = c.im();
  Network& net = c.net();
  Tensor* count = scalar_of(c, c.input(0), "the trip count M");
  if (c.has_input(1)) {
    auto go = im.value(scalar_of(c, c.input(1), "the condition"));
    if (!go || go->ints().at(0) == 0)
      fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "the condition must be true when the model is parsed: tensoracle builds "
                                                     "counted loops only (its trip count is M)");
  }
  Loop* loop = net.add_loop();
  loop->add_trip_limit(count, TripLimit::kCOUNT);
  // The iteration number: a recurrence from 0, one more each iteration.
  std::int64_t zero = 0, one = 1;
  auto* iteration = loop->add_recurrence(im.constant(Dims{}, Weights::copy_of(DataType::kINT64, &zero, 1)));
  auto* next = net.add_elementwise(iteration->get_output(0), im.constant(Dims{}, Weights::copy_of(DataType::kINT64, &one, 1)),
                                   ElementWiseOperation::kSUM);
  net.set_layer_input(iteration, 1, next->get_output(0));
  im.bind(body.input(0).name(), iteration->get_output(0));
  // The condition inside the body: true (a counted loop), which the body must keep.
  bool yes = true;
  im.bind(body.input(1).name(), im.constant(Dims{}, Weights::copy_of(DataType::kBOOL, &yes, 1)));
  std::vector<RecurrenceLayer*> state;
  for (int k = 0; k < carried; ++k) {
    state.push_back(loop->add_recurrence(c.input(2 + k)));
    im.bind(body.input(2 + k).name(), state.back()->get_output(0));
  }
  auto outs = convert_subgraph(c, body, "body");
  auto keep_going = im.value(scalar_of(c, outs[0], "the body's condition"));
  if (!keep_going || keep_going->ints().at(0) == 0)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "the body's condition (output 0) must stay true: tensoracle builds counted "
                                                   "loops only");
  for (int k = 0; k < carried; ++k) net.set_layer_input(state[static_cast<std::size_t>(k)], 1, outs[static_cast<std::size_t>(1 + k)]);
  for (int k = 0; k < c.num_outputs(); ++k) {
    if (!c.wants_output(k)) continue;
    if (k < carried) {
      c.output(k, loop->add_loop_output(state[static_cast<std::size_t>(k)]->get_output(0), LoopOutput::kLAST_VALUE)->get_output(0));
    } else {
      auto* scan = loop->add_loop_output(outs[static_cast<std::size_t>(1 + k)], LoopOutput::kCONCATENATE, 0);
      net.set_layer_input(scan, 1, count);
      c.output(k, scan->get_output(0));
    }
  }
}

}  // namespace

void add_control_ops(ConverterTable& t) {
  t["If"] = if_op;
  t["Loop"] = loop_op;
}

}  // namespace tensoracle::onnx
