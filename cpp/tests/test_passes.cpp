// Builder passes: each checked by the graph's structure after it runs, not only by numbers.
#include <gtest/gtest.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "builder/passes.h"
#include "graph/graph.h"
#include "plan/memory_plan.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using graph::Graph;

namespace {

Weights floats(std::vector<float> v) { return Weights::copy_of(DataType::kFLOAT, v.data(), static_cast<std::int64_t>(v.size())); }

std::vector<std::string> node_names(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes) out.push_back(n.name);
  return out;
}

auto fuse_all = [](const Graph&, const graph::Node&, const graph::EpilogueOp&) { return true; };

}  // namespace

TEST(Passes, DeadCodeRemovesUnreachableNodesAndConstants) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 2});
  auto* unused_c = net.add_constant({2, 2}, floats({1, 2, 3, 4}))->get_output(0);
  auto* dead = net.add_elementwise(x, unused_c, ElementWiseOperation::kSUM);
  dead->set_name("dead_sum");
  auto* live = net.add_activation(x, ActivationType::kRELU);
  live->set_name("relu");
  net.mark_output(live->get_output(0));
  Graph g = graph::from_network(net);
  ASSERT_EQ(g.nodes.size(), 2u);
  auto log = builder::dead_code(g);
  graph::verify(g, "dead_code");
  EXPECT_EQ(node_names(g), std::vector<std::string>{"relu"});
  EXPECT_EQ(g.values.size(), 2u);  // x and relu's output; the constant went too
  ASSERT_FALSE(log.changes.empty());
  EXPECT_NE(log.changes[0].find("dead_sum"), std::string::npos);
}

TEST(Passes, ConstantFoldingEvaluatesConstantSubgraphsButKeepsDequantize) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {1, 4});
  auto* a = net.add_constant({1, 4}, floats({1, 2, 3, 4}))->get_output(0);
  auto* b = net.add_constant({1, 4}, floats({10, 20, 30, 40}))->get_output(0);
  auto* ab = net.add_elementwise(a, b, ElementWiseOperation::kSUM);
  ab->set_name("const_sum");
  auto* scale = net.add_constant({1}, floats({0.5f}))->get_output(0);
  auto* q = net.add_quantize(ab->get_output(0), scale, DataType::kINT8);
  q->set_name("q_weights");
  auto* dq = net.add_dequantize(q->get_output(0), scale, DataType::kFLOAT);
  dq->set_name("dq_weights");
  auto* y = net.add_elementwise(x, dq->get_output(0), ElementWiseOperation::kPROD);
  y->set_name("mul");
  net.mark_output(y->get_output(0));
  Graph g = graph::from_network(net);
  auto log = builder::constant_fold(g, cpu::evaluate_constant_node);
  graph::verify(g, "constant_fold");
  EXPECT_EQ(node_names(g), (std::vector<std::string>{"dq_weights", "mul"}));
  ASSERT_EQ(log.changes.size(), 2u);
  // The quantized weights are now an int8 constant: (1+10)/0.5 = 22, ..., saturating at 127.
  const auto& qv = g.values[static_cast<std::size_t>(g.nodes[0].inputs[0])];
  ASSERT_TRUE(qv.constant.has_value());
  EXPECT_EQ(qv.desc.type, DataType::kINT8);
  auto* q8 = static_cast<const std::int8_t*>(qv.constant->values());
  EXPECT_EQ(q8[0], 22);
  EXPECT_EQ(q8[1], 44);
  EXPECT_EQ(q8[2], 66);
  EXPECT_EQ(q8[3], 88);
}

TEST(Passes, FusionAbsorbsPointwiseChainsIntoTheirProducer) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {8, 16});
  auto* w = net.add_constant({16, 4}, floats(std::vector<float>(64, 0.5f)))->get_output(0);
  auto* bias = net.add_constant({1, 4}, floats({1, 2, 3, 4}))->get_output(0);
  auto* mm = net.add_matrix_multiply(x, MatrixOperation::kNONE, w, MatrixOperation::kNONE);
  mm->set_name("mm");
  auto* add = net.add_elementwise(bias, mm->get_output(0), ElementWiseOperation::kSUM);  // bias first
  add->set_name("bias");
  auto* act = net.add_activation(add->get_output(0), ActivationType::kGELU_ERF);
  act->set_name("gelu");
  auto* cast = net.add_cast(act->get_output(0), DataType::kHALF);
  cast->set_name("to_half");
  net.mark_output(cast->get_output(0));
  Graph g = graph::from_network(net);
  auto log = builder::fuse_pointwise(g, fuse_all);
  graph::verify(g, "fuse_pointwise");
  ASSERT_EQ(g.nodes.size(), 1u);
  const auto& n = g.nodes[0];
  EXPECT_EQ(n.name, "mm");
  ASSERT_EQ(n.epilogue.size(), 3u);
  EXPECT_EQ(n.epilogue[0].layer, "bias");
  EXPECT_TRUE(n.epilogue[0].operand_first);
  EXPECT_EQ(n.epilogue[1].layer, "gelu");
  EXPECT_EQ(n.epilogue[2].layer, "to_half");
  EXPECT_EQ(g.values[static_cast<std::size_t>(n.output)].desc.type, DataType::kHALF);
  EXPECT_EQ(n.main_desc.type, DataType::kFLOAT);
  EXPECT_EQ(log.changes.size(), 3u);
}

TEST(Passes, FusionStopsAtSharedOutputsAndUpcastingBroadcasts) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {4, 1});
  auto* y = net.add_input("y", DataType::kFLOAT, {4, 8});
  auto* r = net.add_activation(x, ActivationType::kRELU);
  r->set_name("relu");
  // relu's output (4, 1) broadcasts up to (4, 8): the sum cannot run as relu's epilogue.
  auto* s = net.add_elementwise(r->get_output(0), y, ElementWiseOperation::kSUM);
  s->set_name("sum");
  // sum's output has two readers: neither may absorb it.
  auto* t = net.add_activation(s->get_output(0), ActivationType::kTANH);
  t->set_name("tanh");
  auto* u = net.add_activation(s->get_output(0), ActivationType::kSIGMOID);
  u->set_name("sigmoid");
  net.mark_output(t->get_output(0));
  net.mark_output(u->get_output(0));
  Graph g = graph::from_network(net);
  auto log = builder::fuse_pointwise(g, fuse_all);
  graph::verify(g, "fuse_pointwise");
  EXPECT_EQ(node_names(g), (std::vector<std::string>{"relu", "sum", "tanh", "sigmoid"}));
  EXPECT_TRUE(log.changes.empty());
  // A backend that declines fusion is respected.
  Network net2;
  auto* a = net2.add_input("a", DataType::kFLOAT, {4});
  auto* b = net2.add_activation(net2.add_activation(a, ActivationType::kRELU)->get_output(0), ActivationType::kTANH);
  net2.mark_output(b->get_output(0));
  Graph g2 = graph::from_network(net2);
  builder::fuse_pointwise(g2, [](const Graph&, const graph::Node&, const graph::EpilogueOp&) { return false; });
  EXPECT_EQ(g2.nodes.size(), 2u);
}

TEST(Passes, MemoryPlanSharesBytesBetweenValuesThatAreNotLiveTogether) {
  // A chain x -> a -> b -> c -> d(out): a and c can share, b sits beside them.
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {256});
  Tensor* t = x;
  for (const char* name : {"a", "b", "c"}) {
    auto* l = net.add_activation(t, ActivationType::kRELU);
    l->set_name(name);
    t = l->get_output(0);
  }
  auto* d = net.add_activation(t, ActivationType::kTANH);
  net.mark_output(d->get_output(0));
  Graph g = graph::from_network(net);
  std::vector<std::uint64_t> bytes(g.values.size(), 1024);
  auto memory = plan::plan_memory(g, bytes);
  EXPECT_EQ(memory.naive_bytes, 3 * 1024u);
  EXPECT_EQ(memory.arena_bytes, 2 * 1024u);
  auto off = [&](const char* layer) {
    for (const auto& n : g.nodes)
      if (n.name == layer) return memory.offsets[static_cast<std::size_t>(n.output)];
    return std::int64_t{-2};
  };
  EXPECT_EQ(off("a"), off("c"));
  EXPECT_NE(off("a"), off("b"));
  EXPECT_EQ(memory.offsets[static_cast<std::size_t>(g.outputs[0])], -1);  // outputs use caller buffers
  EXPECT_EQ(memory.offsets[static_cast<std::size_t>(g.inputs[0])], -1);
  // Every pair of values whose lifetimes overlap occupies disjoint bytes.
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (std::size_t j = i + 1; j < g.nodes.size(); ++j) {
      auto vi = static_cast<std::size_t>(g.nodes[i].output), vj = static_cast<std::size_t>(g.nodes[j].output);
      if (memory.offsets[vi] < 0 || memory.offsets[vj] < 0 || j > i + 1) continue;
      EXPECT_TRUE(memory.offsets[vi] + 1024 <= memory.offsets[vj] || memory.offsets[vj] + 1024 <= memory.offsets[vi]);
    }
}

// Q/DQ folding: the product reads the quantized operands and their scales; a constant [K, N]
// matrix is stored transposed ([N, K], op1 = TRANSPOSE); the dequantize nodes die.
TEST(Passes, FoldQdqRewritesAQuantizedProductIntoOneNode) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 3});
  auto* xs = net.add_constant({1}, floats({0.5f}))->get_output(0);
  auto* ws = net.add_constant({1}, floats({0.25f}))->get_output(0);
  auto* w = net.add_constant({3, 2}, floats({1, 2, 3, 4, 5, 6}))->get_output(0);
  auto* qx = net.add_quantize(x, xs, DataType::kINT8);
  auto* dqx = net.add_dequantize(qx->get_output(0), xs, DataType::kFLOAT);
  dqx->set_name("dq_x");
  auto* qw = net.add_quantize(w, ws, DataType::kINT8);
  auto* dqw = net.add_dequantize(qw->get_output(0), ws, DataType::kFLOAT);
  dqw->set_name("dq_w");
  auto* mm = net.add_matrix_multiply(dqx->get_output(0), MatrixOperation::kNONE, dqw->get_output(0), MatrixOperation::kNONE);
  mm->set_name("mm");
  net.mark_output(mm->get_output(0));
  Graph g = graph::from_network(net);
  builder::constant_fold(g, cpu::evaluate_constant_node);
  builder::dead_code(g);
  auto log = builder::fold_qdq(g);
  graph::verify(g, "fold_qdq");
  builder::dead_code(g);
  graph::verify(g, "dead_code");
  ASSERT_EQ(log.changes.size(), 1u);
  EXPECT_NE(log.changes[0].find("an int8 matrix multiply"), std::string::npos) << log.changes[0];
  ASSERT_EQ(node_names(g), (std::vector<std::string>{qx->name(), "mm"}));
  const graph::Node& n = g.nodes[1];
  EXPECT_TRUE(n.quantized());
  EXPECT_EQ(n.folded_dequantize, (std::vector<std::string>{"dq_x", "dq_w"}));
  EXPECT_EQ(std::get<MatrixMultiplyParams>(n.params).op1, MatrixOperation::kTRANSPOSE);
  ASSERT_EQ(n.inputs.size(), 4u);
  const auto& wq = g.values[static_cast<std::size_t>(n.inputs[1])];
  ASSERT_TRUE(wq.constant.has_value());
  EXPECT_EQ(wq.desc.dims, (Dims{2, 3}));
  // w / 0.25 = {4, 8, 12, 16, 20, 24} row-major [3, 2]; transposed: {4, 12, 20, 8, 16, 24}.
  const auto* q = static_cast<const std::int8_t*>(wq.constant->values());
  EXPECT_EQ(std::vector<int>(q, q + 6), (std::vector<int>{4, 12, 20, 8, 16, 24}));
  EXPECT_EQ(g.values[static_cast<std::size_t>(n.inputs[2])].desc.dims, (Dims{1}));
  EXPECT_EQ(graph::arithmetic_type(g, n), DataType::kINT8);
}

namespace {

// scores = Q · Kᵀ, * 0.125, + mask, softmax over the last axis, · V; `mask_reader` gives the
// masked scores a second reader (no fusion then).
Graph decomposed_attention(bool second_reader) {
  Network net;
  auto* q = net.add_input("q", DataType::kFLOAT, {2, 4, 8, 16});
  auto* k = net.add_input("k", DataType::kFLOAT, {2, 1, 9, 16});
  auto* v = net.add_input("v", DataType::kFLOAT, {2, 1, 9, 16});
  auto* mask = net.add_input("mask", DataType::kFLOAT, {2, 1, 1, 9});
  auto* s = net.add_matrix_multiply(q, MatrixOperation::kNONE, k, MatrixOperation::kTRANSPOSE);
  s->set_name("scores");
  auto* c = net.add_constant({1, 1, 1, 1}, floats({0.125f}))->get_output(0);
  auto* scaled = net.add_elementwise(c, s->get_output(0), ElementWiseOperation::kPROD);
  scaled->set_name("scale");
  auto* masked = net.add_elementwise(scaled->get_output(0), mask, ElementWiseOperation::kSUM);
  masked->set_name("mask_add");
  auto* p = net.add_softmax(masked->get_output(0));
  p->set({1u << 3});
  p->set_name("probs");
  auto* o = net.add_matrix_multiply(p->get_output(0), MatrixOperation::kNONE, v, MatrixOperation::kNONE);
  o->set_name("context");
  net.mark_output(o->get_output(0));
  if (second_reader) net.mark_output(masked->get_output(0));
  return graph::from_network(net);
}

}  // namespace

TEST(Passes, AttentionFusionReplacesTheDecomposedChainByOneNode) {
  Graph g = decomposed_attention(false);
  auto log = builder::fuse_attention(g, [](const Graph&, const graph::Node&) { return true; });
  graph::verify(g, "fuse_attention");
  ASSERT_EQ(g.nodes.size(), 1u);
  const auto& n = g.nodes[0];
  EXPECT_EQ(n.name, "context");
  ASSERT_EQ(n.type(), LayerType::kATTENTION);
  EXPECT_FLOAT_EQ(std::get<AttentionParams>(n.params).scale, 0.125f);
  EXPECT_EQ(n.absorbed, (std::vector<std::string>{"scores", "scale", "mask_add", "probs"}));
  ASSERT_EQ(n.inputs.size(), 4u);
  EXPECT_EQ(g.values[static_cast<std::size_t>(n.inputs[3])].name, "mask");
  EXPECT_EQ(graph::fused_layers(n), n.absorbed);
  ASSERT_EQ(log.changes.size(), 1u);
  EXPECT_NE(log.changes[0].find("'probs'"), std::string::npos);
}

TEST(Passes, AttentionFusionLeavesSharedScoresAndRefusedCandidates) {
  Graph shared = decomposed_attention(true);
  builder::fuse_attention(shared, [](const Graph&, const graph::Node&) { return true; });
  EXPECT_EQ(shared.nodes.size(), 5u);
  Graph refused = decomposed_attention(false);
  int asked = 0;
  auto log = builder::fuse_attention(refused, [&](const Graph&, const graph::Node& n) {
    ++asked;
    EXPECT_EQ(n.type(), LayerType::kATTENTION);
    return false;
  });
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(refused.nodes.size(), 5u);
  EXPECT_TRUE(log.changes.empty());
}

TEST(Passes, WeakTypingLowersFloat32LayersButKeepsReductionsAndTheIO) {
  // x -> product with constant weights -> relu -> (output "act") -> reduce -> (output "sum")
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 3});
  auto* w = net.add_constant({3, 2}, floats({1, 2, 3, 4, 5, 6}))->get_output(0);
  auto* mm = net.add_matrix_multiply(x, MatrixOperation::kNONE, w, MatrixOperation::kNONE);
  mm->set_name("mm");
  auto* relu = net.add_activation(mm->get_output(0), ActivationType::kRELU);
  relu->set_name("relu");
  relu->get_output(0)->set_name("act");
  net.mark_output(relu->get_output(0));
  auto* sum = net.add_reduce(relu->get_output(0), ReduceOperation::kSUM, 0b11, false);
  sum->set_name("sum");
  sum->get_output(0)->set_name("total");
  net.mark_output(sum->get_output(0));

  Graph g = graph::from_network(net);
  Graph unchanged = g;
  EXPECT_TRUE(builder::lower_precision(unchanged, DataType::kFLOAT, {}).changes.empty());
  EXPECT_EQ(node_names(unchanged), node_names(g));

  auto log = builder::lower_precision(g, DataType::kHALF, {});
  graph::verify(g, "lower_precision");
  // a cast of x, the lowered product and relu, relu's output cast back for the network (and the
  // reduction, which stays float32 and reads that float32 output)
  EXPECT_EQ(node_names(g), (std::vector<std::string>{"x/float16", "mm", "relu", "relu/float32", "sum"}));
  ASSERT_EQ(log.changes.size(), 2u);
  EXPECT_NE(log.changes[1].find("output 'act' cast back to float32"), std::string::npos);
  const auto& mm_node = g.nodes[1];
  EXPECT_EQ(mm_node.main_desc.type, DataType::kHALF);
  const auto& weights = g.values[static_cast<std::size_t>(mm_node.inputs[1])];
  ASSERT_TRUE(weights.constant.has_value());
  EXPECT_EQ(weights.desc.type, DataType::kHALF);
  EXPECT_EQ(static_cast<const std::uint16_t*>(weights.constant->values())[5], 0x4600);  // 6.0 in float16
  EXPECT_EQ(g.nodes[4].main_desc.type, DataType::kFLOAT);
  EXPECT_EQ(g.values[static_cast<std::size_t>(g.nodes[4].inputs[0])].name, "act");
  for (int v : g.outputs) EXPECT_EQ(g.values[static_cast<std::size_t>(v)].desc.type, DataType::kFLOAT);
  EXPECT_EQ(g.values[static_cast<std::size_t>(g.inputs[0])].desc.type, DataType::kFLOAT);
  // the float32 weights are gone: no node reads them
  for (const auto& v : g.values)
    if (v.constant) EXPECT_EQ(v.desc.type, DataType::kHALF);
}

TEST(Passes, WeakTypingKeepsWhatThePolicyRefuses) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {4});
  auto* a = net.add_activation(x, ActivationType::kRELU);
  a->set_name("relu");
  a->get_output(0)->set_name("r");
  auto* t = net.add_activation(a->get_output(0), ActivationType::kTANH);
  t->set_name("tanh");
  net.mark_output(t->get_output(0));
  Graph g = graph::from_network(net);
  auto refuse_tanh = [](const Graph&, const graph::Node& n) { return n.name != "tanh"; };
  builder::lower_precision(g, DataType::kBF16, refuse_tanh);
  builder::dead_code(g);
  graph::verify(g, "lower_precision");
  EXPECT_EQ(node_names(g), (std::vector<std::string>{"x/bfloat16", "relu", "r/float32", "tanh"}));
  EXPECT_EQ(g.nodes[1].main_desc.type, DataType::kBF16);
  EXPECT_EQ(g.nodes[3].main_desc.type, DataType::kFLOAT);
}
