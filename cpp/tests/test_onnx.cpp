// OnnxParser from C++ (tensoracle/onnx_parser.h): models written with the generated schema
// classes, parsed, built on the CPU and run; failures leave the network unchanged; open_engine
// takes an ONNX file through onnx_graph and onnx_model_files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "onnx/onnx_schema.pb.h"
#include "tensoracle/builder.h"
#include "tensoracle/cache.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"
#include "tensoracle/onnx_parser.h"

namespace {

namespace pb = ::tensoracle_onnx;
using namespace tensoracle;

void value_info(pb::ValueInfoProto* v, const std::string& name, const std::vector<std::int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(pb::TensorProto::FLOAT);
  for (auto d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (d < 0) dim->set_dim_param("batch");
    else dim->set_dim_value(d);
  }
}

// y = relu(x @ w + b), x [batch, 3], w [3, 2], b [2]
std::string linear_model(const std::string& op = "Relu") {
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("linear");
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(pb::TensorProto::FLOAT);
  w->add_dims(3);
  w->add_dims(2);
  for (float v : {1.f, -1.f, 2.f, 0.5f, -3.f, 1.f}) w->add_float_data(v);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(pb::TensorProto::FLOAT);
  b->add_dims(2);
  const float bias[2] = {0.25f, -0.5f};
  b->set_raw_data(std::string(reinterpret_cast<const char*>(bias), sizeof(bias)));
  auto node = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->set_name(type + "_" + out);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
  };
  node("MatMul", {"x", "w"}, "xw");
  node("Add", {"xw", "b"}, "z");
  node(op, {"z"}, "y");
  value_info(g->add_input(), "x", {-1, 3});
  value_info(g->add_output(), "y", {-1, 2});
  return m.SerializeAsString();
}

std::span<const std::byte> bytes_of(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

std::vector<float> run(const Engine& engine, const std::vector<float>& x, std::int64_t batch) {
  Execution ex = engine.create_execution();
  ex.set_input_shape("x", Dims{batch, 3});
  std::vector<float> y(static_cast<std::size_t>(batch) * 2);
  ex.set_tensor_address("x", const_cast<float*>(x.data()));
  ex.set_tensor_address("y", y.data());
  ex.enqueue(nullptr);
  return y;
}

std::vector<float> expected(const std::vector<float>& x, std::int64_t batch) {
  const float w[3][2] = {{1, -1}, {2, 0.5f}, {-3, 1}}, b[2] = {0.25f, -0.5f};
  std::vector<float> y;
  for (std::int64_t r = 0; r < batch; ++r)
    for (int c = 0; c < 2; ++c) {
      float s = b[c];
      for (int k = 0; k < 3; ++k) s += x[static_cast<std::size_t>(r * 3 + k)] * w[k][c];
      y.push_back(std::max(s, 0.f));
    }
  return y;
}

TEST(Onnx, ParsesBuildsAndRunsWithADynamicBatch) {
  Network net;
  OnnxParser parser(net);
  const auto model = linear_model();
  ASSERT_TRUE(parser.parse(bytes_of(model))) << parser.get_error(0).str();
  EXPECT_EQ(parser.num_errors(), 0);
  ASSERT_EQ(net.num_inputs(), 1);
  EXPECT_EQ(net.get_input(0)->dims(), (Dims{-1, 3}));
  EXPECT_EQ(net.get_output(0)->name(), "y");
  EngineBuild decl;
  decl.inputs["x"] = InputShape::ranged(Dims{1, 3}, Dims{4, 3}, Dims{8, 3});
  decl.settings.device = "cpu";
  Engine engine = Engine::deserialize(build_serialized_network(net, decl));
  for (std::int64_t batch : {1, 5}) {
    std::vector<float> x;
    for (int i = 0; i < batch * 3; ++i) x.push_back(std::sin(static_cast<float>(i)));
    const auto y = run(engine, x, batch), want = expected(x, batch);
    for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  }
}

TEST(Onnx, AFailedParseLeavesTheNetworkAsItWasAndNamesTheNode) {
  Network net;
  net.add_input("mine", DataType::kFLOAT, Dims{2});
  OnnxParser parser(net);
  EXPECT_FALSE(parser.parse(bytes_of(linear_model("NonZero")), "m.onnx"));
  EXPECT_EQ(net.num_layers(), 1);
  EXPECT_EQ(net.num_outputs(), 0);
  ASSERT_EQ(parser.num_errors(), 1);
  const auto& e = parser.get_error(0);
  EXPECT_EQ(e.code, OnnxErrorCode::kUNSUPPORTED_NODE);
  EXPECT_EQ(e.node, 2);
  EXPECT_EQ(e.node_operator, "NonZero");
  EXPECT_EQ(e.node_name, "NonZero_y");
  EXPECT_EQ(e.str().rfind("[onnx] m.onnx: node 2 'NonZero_y' (NonZero, opset 17): UNSUPPORTED_NODE: ", 0), 0u) << e.str();
  EXPECT_THROW(parser.get_error(1), InvalidArgument);
  parser.clear_errors();
  EXPECT_EQ(parser.num_errors(), 0);
}

TEST(Onnx, BadBytesAndFilesAreErrorsNotExceptions) {
  Network net;
  OnnxParser parser(net);
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f not a model";
  EXPECT_FALSE(parser.parse(bytes_of(garbage)));
  EXPECT_EQ(parser.get_error(0).code, OnnxErrorCode::kMODEL_DESERIALIZE_FAILED);
  EXPECT_FALSE(parser.parse_from_file("/nonexistent/model.onnx"));
  EXPECT_EQ(parser.get_error(0).file, "/nonexistent/model.onnx");
  EXPECT_EQ(net.num_layers(), 0);
  EXPECT_TRUE(OnnxParser::supports_operator("Conv"));
  EXPECT_FALSE(OnnxParser::supports_operator("NonZero"));
  EXPECT_GE(OnnxParser::max_opset(), 21);
}

TEST(Onnx, OpenEngineTakesTheModelFileAndRebuildsWhenItChanges) {
  const auto dir = std::filesystem::temp_directory_path() / ("tensoracle_onnx_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "linear.onnx";
  std::ofstream(path, std::ios::binary) << linear_model();
  EngineBuild decl;
  decl.inputs["x"] = InputShape::fixed(Dims{2, 3});
  decl.settings.device = "cpu";
  OpenOptions o;
  o.name = "linear";
  o.graph_version = "1";
  o.weights = onnx_model_files(path);
  o.cache_dir = dir / "cache";
  o.io.inputs["x"] = TensorSpec{DataType::kFLOAT, Dims{-1, 3}};
  o.io.outputs["y"] = TensorSpec{DataType::kFLOAT, Dims{-1, 2}};
  ASSERT_EQ(o.weights.size(), 1u);
  auto first = open_engine(onnx_graph(path), decl, o);
  auto again = open_engine(onnx_graph(path), decl, o);
  EXPECT_TRUE(first.built);
  EXPECT_FALSE(again.built);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << linear_model("Sigmoid");
  auto changed = open_engine(onnx_graph(path), decl, o);
  EXPECT_TRUE(changed.built);
  EXPECT_NE(changed.identity, first.identity);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << linear_model("NonZero");
  o.force_rebuild = true;
  EXPECT_THROW(open_engine(onnx_graph(path), decl, o), InvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
