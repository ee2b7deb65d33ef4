// Loops (Network::add_loop, TensorRT's ILoop) and conditionals (add_if_conditional): their
// boundary layers, their lowering into the IR (graph/from_network.cpp) and engines with them run
// on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"

using namespace tensoracle;

namespace {

Tensor* scalar(Network& net, std::int32_t v) {
  return net.add_constant(Dims{}, Weights::copy_of(DataType::kINT32, &v, 1))->get_output(0);
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

EngineBuild fixed(const std::string& name, const Dims& dims) {
  EngineBuild d;
  d.inputs[name] = InputShape::fixed(dims);
  d.settings.device = "cpu";
  return d;
}

// x doubled `trips` times: the last value, every iteration's value stacked (CONCATENATE of the
// doubled value), and the recurrence's values reversed (REVERSE), of `length` entries.
void doubling(Network& net, std::int32_t trips, std::int32_t length) {
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 3});
  Loop* loop = net.add_loop();
  loop->add_trip_limit(scalar(net, trips), TripLimit::kCOUNT);
  auto* r = loop->add_recurrence(x);
  auto* twice = net.add_elementwise(r->get_output(0), r->get_output(0), ElementWiseOperation::kSUM);
  net.set_layer_input(r, 1, twice->get_output(0));
  auto* last = loop->add_loop_output(r->get_output(0), LoopOutput::kLAST_VALUE);
  auto* all = loop->add_loop_output(twice->get_output(0), LoopOutput::kCONCATENATE, 1);
  net.set_layer_input(all, 1, scalar(net, length));
  auto* back = loop->add_loop_output(r->get_output(0), LoopOutput::kREVERSE);
  net.set_layer_input(back, 1, scalar(net, length));
  last->get_output(0)->set_name("last");
  all->get_output(0)->set_name("all");
  back->get_output(0)->set_name("back");
  net.mark_output(last->get_output(0));
  net.mark_output(all->get_output(0));
  net.mark_output(back->get_output(0));
}

}  // namespace

TEST(Loops, BoundaryLayersDescribeTheLoop) {
  Network net;
  doubling(net, 3, 3);
  ASSERT_EQ(net.num_loops(), 1);
  Loop* loop = net.get_loop(0);
  EXPECT_EQ(loop->name(), "loop_0");
  loop->set_name("doubling");
  int boundary = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    Layer* l = net.get_layer(i);
    if (auto* b = dynamic_cast<LoopBoundaryLayer*>(l)) {
      ++boundary;
      EXPECT_EQ(b->loop(), loop);
      if (l->type() == LayerType::kTRIP_LIMIT) EXPECT_EQ(l->num_outputs(), 0);
    }
  }
  EXPECT_EQ(boundary, 5);
  // CONCATENATE inserts its axis with the length the constant gives.
  EXPECT_EQ(net.get_output(1)->dims(), (Dims{2, 3, 3}));
  EXPECT_EQ(net.get_output(2)->dims(), (Dims{3, 2, 3}));
  EXPECT_THROW(loop->add_trip_limit(scalar(net, 2), TripLimit::kCOUNT), InvalidArgument);  // one COUNT limit
  EXPECT_THROW(net.get_loop(1), InvalidArgument);
}

TEST(Loops, UnrolledIntoTheIR) {
  Network net;
  doubling(net, 4, 4);
  net.validate();
  graph::Graph g = graph::from_network(net);
  graph::verify(g, "from_network");
  int sums = 0;
  for (const auto& n : g.nodes) sums += n.type() == LayerType::kELEMENTWISE;
  EXPECT_EQ(sums, 4);  // the body once per iteration
  EXPECT_NE(g.find_value("elementwise_4_output[3]"), -1);
  for (const auto& n : g.nodes) EXPECT_LT(static_cast<int>(n.type()), static_cast<int>(LayerType::kTRIP_LIMIT)) << n.name;
}

TEST(Loops, CountedLoopRunsOnTheCpu) {
  for (auto [trips, length] : {std::pair{3, 3}, {3, 5}, {4, 2}, {0, 2}}) {
    SCOPED_TRACE("trips " + std::to_string(trips) + ", length " + std::to_string(length));
    Engine e = Engine::deserialize(build_serialized_engine([&](Network& n) { doubling(n, trips, length); }, fixed("x", {2, 3})));
    std::vector<float> x = {1, -2, 3, 0.5f, 4, -1};
    auto out = e.create_execution().run({{"x", {DataType::kFLOAT, {2, 3}, x.data()}}});
    const auto* last = reinterpret_cast<const float*>(out.at("last").data.get());
    const auto* all = reinterpret_cast<const float*>(out.at("all").data.get());
    const auto* back = reinterpret_cast<const float*>(out.at("back").data.get());
    EXPECT_EQ(out.at("all").dims, (Dims{2, length, 3}));
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ(last[k], x[static_cast<std::size_t>(k)] * std::ldexp(1.f, trips));
      for (int i = 0; i < length; ++i) {
        // Iteration i's doubled value; zeros beyond the trip count (TensorRT's rule).
        const float want = i < trips ? x[static_cast<std::size_t>(k)] * std::ldexp(1.f, i + 1) : 0.f;
        EXPECT_EQ(all[(k / 3) * length * 3 + i * 3 + k % 3], want) << i;
        // The recurrence's values (before each update), the last iteration first.
        const int used = std::min(trips, length);
        const float was = i < used ? x[static_cast<std::size_t>(k)] * std::ldexp(1.f, used - 1 - i) : 0.f;
        EXPECT_EQ(back[i * 6 + k], was) << i;
      }
    }
  }
}

// An iterator over a dim: a running sum (recurrence), and the slices stacked back reversed.
TEST(Loops, IteratorsRunningSumAndReverse) {
  auto graph = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {4, 5});
    Loop* loop = net.add_loop();
    auto* it = loop->add_iterator(x, 1, true);  // columns, last first; no trip limit: the dim's length
    float zero[4] = {0, 0, 0, 0};
    auto* r = loop->add_recurrence(net.add_constant({4}, Weights::copy_of(DataType::kFLOAT, zero, 4))->get_output(0));
    auto* sum = net.add_elementwise(r->get_output(0), it->get_output(0), ElementWiseOperation::kSUM);
    net.set_layer_input(r, 1, sum->get_output(0));
    auto* total = loop->add_loop_output(r->get_output(0), LoopOutput::kLAST_VALUE);
    auto* cols = loop->add_loop_output(it->get_output(0), LoopOutput::kCONCATENATE, 1);
    net.set_layer_input(cols, 1, scalar(net, 5));
    total->get_output(0)->set_name("total");
    cols->get_output(0)->set_name("cols");
    net.mark_output(total->get_output(0));
    net.mark_output(cols->get_output(0));
  };
  Engine e = Engine::deserialize(build_serialized_engine(graph, fixed("x", {4, 5})));
  std::vector<float> x(20);
  for (int i = 0; i < 20; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i * i % 7) - 2.5f;
  auto out = e.create_execution().run({{"x", {DataType::kFLOAT, {4, 5}, x.data()}}});
  const auto* total = reinterpret_cast<const float*>(out.at("total").data.get());
  const auto* cols = reinterpret_cast<const float*>(out.at("cols").data.get());
  for (int r = 0; r < 4; ++r) {
    float s = 0;
    for (int c = 0; c < 5; ++c) {
      s += x[static_cast<std::size_t>(r * 5 + c)];
      EXPECT_EQ(cols[r * 5 + c], x[static_cast<std::size_t>(r * 5 + 4 - c)]);
    }
    EXPECT_FLOAT_EQ(total[r], s);
  }
}

TEST(Loops, WhatCannotBeUnrolledIsRefused) {
  auto build = [](const GraphFunction& fn, const EngineBuild& d) { build_serialized_engine(fn, d); };
  // A WHILE limit.
  auto while_loop = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2});
    Loop* loop = net.add_loop();
    auto* r = loop->add_recurrence(x);
    auto* y = net.add_elementwise(r->get_output(0), r->get_output(0), ElementWiseOperation::kSUM);
    net.set_layer_input(r, 1, y->get_output(0));
    auto* s = net.add_reduce(r->get_output(0), ReduceOperation::kSUM, 1, false)->get_output(0);
    float ten = 10;
    auto* c = net.add_elementwise(s, net.add_constant(Dims{}, Weights::copy_of(DataType::kFLOAT, &ten, 1))->get_output(0),
                                  ElementWiseOperation::kLESS);
    loop->add_trip_limit(c->get_output(0), TripLimit::kWHILE);
    auto* out = loop->add_loop_output(r->get_output(0), LoopOutput::kLAST_VALUE);
    net.mark_output(out->get_output(0));
  };
  EXPECT_NE(error_of<UnsupportedError>([&] { build(while_loop, fixed("x", {2})); }).find("WHILE trip limits"), std::string::npos);

  // A trip count known only at run time (a dim that varies within the profile).
  auto dynamic = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {-1, 2});
    Loop* loop = net.add_loop();
    auto* shape = net.add_shape(x)->get_output(0);
    std::int32_t zero = 0;
    auto* n = net.add_gather(shape, net.add_constant(Dims{}, Weights::copy_of(DataType::kINT32, &zero, 1))->get_output(0), 0);
    auto* n32 = net.add_cast(n->get_output(0), DataType::kINT32)->get_output(0);
    loop->add_trip_limit(n32, TripLimit::kCOUNT);
    auto* it = loop->add_iterator(x, 0);
    auto* out = loop->add_loop_output(it->get_output(0), LoopOutput::kLAST_VALUE);
    net.mark_output(out->get_output(0));
  };
  EngineBuild ranged = fixed("x", {3, 2});
  ranged.inputs["x"] = InputShape::ranged({1, 2}, {3, 2}, {8, 2});
  EXPECT_NE(error_of<UnsupportedError>([&] { build(dynamic, ranged); }).find("trip count"), std::string::npos);
  // The same loop builds where the profile fixes the dim: the count is the value the shapes give.
  EngineBuild pinned = fixed("x", {3, 2});
  pinned.inputs["x"] = InputShape::ranged({3, 2}, {3, 2}, {3, 2});
  Engine e = Engine::deserialize(build_serialized_engine(dynamic, pinned));
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  auto got = e.create_execution().run({{"x", {DataType::kFLOAT, {3, 2}, x.data()}}});
  const auto* last = reinterpret_cast<const float*>(got.begin()->second.data.get());
  EXPECT_EQ(last[0], 5.f);
  EXPECT_EQ(last[1], 6.f);

  // A value of the body used outside the loop without a loop output.
  auto leak = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2});
    Loop* loop = net.add_loop();
    loop->add_trip_limit(scalar(net, 2), TripLimit::kCOUNT);
    auto* r = loop->add_recurrence(x);
    auto* y = net.add_activation(r->get_output(0), ActivationType::kRELU);
    net.set_layer_input(r, 1, y->get_output(0));
    net.mark_output(y->get_output(0));
  };
  EXPECT_NE(error_of<InvalidArgument>([&] { build(leak, fixed("x", {2})); }).find("add_loop_output"), std::string::npos);

  // A recurrence without its next value; a stacked output without its length.
  auto unfinished = [](bool next) {
    return [next](Network& net) {
      auto* x = net.add_input("x", DataType::kFLOAT, {2});
      Loop* loop = net.add_loop();
      loop->add_trip_limit(scalar(net, 2), TripLimit::kCOUNT);
      auto* r = loop->add_recurrence(x);
      auto* y = net.add_activation(r->get_output(0), ActivationType::kRELU);
      if (next) net.set_layer_input(r, 1, y->get_output(0));
      auto* out = loop->add_loop_output(y->get_output(0), next ? LoopOutput::kCONCATENATE : LoopOutput::kLAST_VALUE);
      net.mark_output(out->get_output(0));
    };
  };
  EXPECT_NE(error_of<InvalidArgument>([&] { build(unfinished(false), fixed("x", {2})); }).find("no next value"), std::string::npos);
  EXPECT_NE(error_of<InvalidArgument>([&] { build(unfinished(true), fixed("x", {2})); }).find("needs its length"), std::string::npos);

  // A recurrence whose next value changes its shape.
  Network net;
  auto* start = net.add_input("start", DataType::kFLOAT, {2});
  Loop* loop = net.add_loop();
  auto* r = loop->add_recurrence(start);
  auto* wide = net.add_concatenation({r->get_output(0), r->get_output(0)});
  EXPECT_NE(error_of<InvalidArgument>([&] { net.set_layer_input(r, 1, wide->get_output(0)); }).find("keeps its shape"),
            std::string::npos);
  EXPECT_EQ(r->num_inputs(), 1);
}

// y = cond ? relu(x) * 2 : -x, with the condition from data (both branches run, a select keeps
// one), from a constant (one branch only), and inside a loop's body.
TEST(Conditionals, SelectBetweenBranches) {
  auto graph = [](bool constant_condition) {
    return [constant_condition](Network& net) {
      auto* x = net.add_input("x", DataType::kFLOAT, {2, 3});
      auto* flag = net.add_input("flag", DataType::kBOOL, {});
      IfConditional* cond = net.add_if_conditional();
      bool t = true;
      cond->set_condition(constant_condition ? net.add_constant(Dims{}, Weights::copy_of(DataType::kBOOL, &t, 1))->get_output(0)
                                             : flag);
      auto* in = cond->add_input(x)->get_output(0);
      auto* relu = net.add_activation(in, ActivationType::kRELU)->get_output(0);
      auto* twice = net.add_elementwise(relu, relu, ElementWiseOperation::kSUM)->get_output(0);
      auto* neg = net.add_unary(in, UnaryOperation::kNEG)->get_output(0);
      auto* out = cond->add_output(twice, neg)->get_output(0);
      out->set_name("y");
      net.mark_output(out);
      auto* keep = net.add_identity(flag)->get_output(0);
      keep->set_name("flag_out");
      net.mark_output(keep);
    };
  };
  EngineBuild d = fixed("x", {2, 3});
  d.inputs["flag"] = InputShape::fixed(Dims{});
  std::vector<float> x = {1, -2, 3, -0.5f, 4, -1};
  for (bool constant : {false, true}) {
    Engine e = Engine::deserialize(build_serialized_engine(graph(constant), d));
    int selects = 0, negs = 0;
    for (const auto& l : e.layers()) {
      selects += l.type == "select";
      negs += l.type == "unary";
    }
    EXPECT_EQ(selects, constant ? 0 : 1);
    EXPECT_EQ(negs, constant ? 0 : 1);  // the branch a known condition leaves is gone
    for (bool flag : {true, false}) {
      if (constant && !flag) continue;
      auto out = e.create_execution().run({{"x", {DataType::kFLOAT, {2, 3}, x.data()}}, {"flag", {DataType::kBOOL, {}, &flag}}});
      const auto* y = reinterpret_cast<const float*>(out.at("y").data.get());
      for (int k = 0; k < 6; ++k) {
        const float v = x[static_cast<std::size_t>(k)];
        EXPECT_EQ(y[k], flag ? 2 * std::max(v, 0.f) : -v) << k;
      }
    }
  }
  Network net;
  IfConditional* cond = net.add_if_conditional();
  EXPECT_EQ(cond->name(), "conditional_0");
  auto* a = net.add_input("a", DataType::kFLOAT, {2});
  EXPECT_THROW(cond->set_condition(a), InvalidArgument);  // not a 0-D bool
  auto* b = net.add_input("b", DataType::kFLOAT, {3});
  EXPECT_THROW(cond->add_output(a, b), InvalidArgument);  // the branches' shapes differ
  auto* o = cond->add_output(a, a)->get_output(0);
  net.mark_output(o);
  EXPECT_NE(error_of<InvalidArgument>([&] {
    net.validate();
    graph::from_network(net);
  }).find("has no condition"), std::string::npos);
}
