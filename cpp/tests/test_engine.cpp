// Builder + engine file + CPU runtime, end to end.
#include <gtest/gtest.h>

#include <functional>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "qdq_models.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

using namespace tensoracle;
using tensoracle::testing::uniform;

namespace {

// features (16x32) @ matrix (32x16) + bias (1x16), then GELU.
struct Linear {
  std::vector<float> matrix = uniform(32 * 16, -0.25f, 0.25f, 29);
  std::vector<float> bias = uniform(16, -0.1f, 0.1f, 30);
  void operator()(Network& net) const {
    auto* x = net.add_input("features", DataType::kFLOAT, {-1, 32});
    auto* w = net.add_constant({32, 16}, Weights(DataType::kFLOAT, matrix.data(), 512, nullptr))->get_output(0);
    auto* b = net.add_constant({1, 16}, Weights(DataType::kFLOAT, bias.data(), 16, nullptr))->get_output(0);
    auto* y = net.add_matrix_multiply(x, MatrixOperation::kNONE, w, MatrixOperation::kNONE)->get_output(0);
    y = net.add_elementwise(y, b, ElementWiseOperation::kSUM)->get_output(0);
    y = net.add_activation(y, ActivationType::kGELU_ERF)->get_output(0);
    y->set_name("result");
    net.mark_output(y);
  }
  std::vector<float> reference(const std::vector<float>& x, int rows) const {
    std::vector<float> out(static_cast<std::size_t>(rows) * 16);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < 16; ++c) {
        double acc = bias[static_cast<std::size_t>(c)];
        for (int k = 0; k < 32; ++k)
          acc += static_cast<double>(x[static_cast<std::size_t>(r * 32 + k)]) * matrix[static_cast<std::size_t>(k * 16 + c)];
        out[static_cast<std::size_t>(r * 16 + c)] = static_cast<float>(0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0))));
      }
    return out;
  }
};

EngineBuild linear_declaration() {
  EngineBuild d;
  d.inputs["features"] = InputShape::ranged({1, 32}, {16, 32}, {64, 32});
  d.settings.device = "cpu";
  return d;
}

// Plan `p` written unedited opens; written with each edit, it is refused with a CorruptEngineError
// whose message holds the edit's text.
void expect_corrupt(const plan::Plan& p,
                    const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>>& edits) {
  EXPECT_NO_THROW(Engine::deserialize(plan::write_engine_with(p, [](nlohmann::json&) {})));
  for (const auto& [what, edit] : edits) {
    try {
      Engine::deserialize(plan::write_engine_with(p, edit));
      ADD_FAILURE() << "accepted a plan that should say: " << what;
    } catch (const CorruptEngineError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

}  // namespace

TEST(Engine, BuildsRunsAndMatchesAReference) {
  Linear model;
  auto bytes = build_serialized_engine(model, linear_declaration());
  Engine e = Engine::deserialize(bytes);
  ASSERT_EQ(e.io_tensors().size(), 2u);
  EXPECT_EQ(e.io_tensor("features").dims, (Dims{-1, 32}));
  EXPECT_EQ(e.io_tensor("result").max, (Dims{64, 16}));
  auto layers = e.layers();
  ASSERT_EQ(layers.size(), 1u);  // matmul + bias + gelu fused into one node
  EXPECT_EQ(layers[0].type, "matrix_multiply");
  EXPECT_EQ(layers[0].fused.size(), 2u);
  EXPECT_FALSE(layers[0].tactic.empty());

  for (int rows : {1, 16, 64}) {
    auto x = uniform(static_cast<std::size_t>(rows) * 32, -1.f, 1.f, static_cast<unsigned>(rows));
    auto exec = e.create_execution();
    auto out = exec.run({{"features", {DataType::kFLOAT, {rows, 32}, x.data()}}});
    const auto& r = out.at("result");
    ASSERT_EQ(r.dims, (Dims{rows, 16}));
    auto ref = model.reference(x, rows);
    const float* got = reinterpret_cast<const float*>(r.data.get());
    for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 2e-5f) << rows << " " << i;
  }
}

namespace {

// features (rows x 32) @ matrix (32 x 16) + bias with per-tensor Q/DQ of both operands in int8
// or fp8 (the reference's precision example). With `expose`, the dequantized operands are
// outputs too, so that the test can compute the product from them.
struct QuantizedLinear {
  DataType type;
  bool expose = false;
  std::vector<float> matrix = uniform(32 * 16, -0.25f, 0.25f, 29);
  std::vector<float> bias = uniform(16, -0.1f, 0.1f, 30);
  float x_scale() const { return 1.f / (type == DataType::kINT8 ? 127.f : 448.f); }
  float w_scale() const { return 0.25f / (type == DataType::kINT8 ? 127.f : 448.f); }
  void operator()(Network& net) const {
    auto constant = [&](Dims d, const float* v) {
      return net.add_constant(d, Weights::copy_of(DataType::kFLOAT, v, d.volume()))->get_output(0);
    };
    const float xs = x_scale(), ws = w_scale();
    auto* x = net.add_input("features", DataType::kFLOAT, {-1, 32});
    auto qdq = [&](Tensor* t, float scale, const char* name) {
      auto* s = constant({1}, &scale);
      auto* q = net.add_quantize(t, s, type);
      q->set_name(std::string("q_") + name);
      auto* dq = net.add_dequantize(q->get_output(0), s, DataType::kFLOAT);
      dq->set_name(std::string("dq_") + name);
      return dq->get_output(0);
    };
    auto* a = qdq(x, xs, "features");
    auto* w = qdq(constant({32, 16}, matrix.data()), ws, "matrix");
    auto* y = net.add_matrix_multiply(a, MatrixOperation::kNONE, w, MatrixOperation::kNONE)->get_output(0);
    y = net.add_elementwise(y, constant({1, 16}, bias.data()), ElementWiseOperation::kSUM)->get_output(0);
    y->set_name("result");
    net.mark_output(y);
    if (expose) {
      a->set_name("dq_features_out");
      w->set_name("dq_matrix_out");
      net.mark_output(a);
      net.mark_output(w);
    }
  }
};

}  // namespace

// The builder folds DQ(a_q) x DQ(w_q) into one int8 / fp8 matrix multiply (the engine shows it);
// on the CPU its result is the product of the dequantized operands.
TEST(Engine, QdqPairsAroundAMatrixMultiplyFoldIntoAQuantizedProduct) {
  for (DataType type : {DataType::kINT8, DataType::kFP8}) {
    SCOPED_TRACE(type_name(type));
    QuantizedLinear plain{type}, exposed{type, true};
    Engine e = Engine::deserialize(build_serialized_engine(plain, linear_declaration()));
    auto layers = e.layers();
    ASSERT_EQ(layers.size(), 2u);
    EXPECT_EQ(layers[0].type, "quantize");
    EXPECT_EQ(layers[1].type, "matrix_multiply");
    EXPECT_EQ(layers[1].precision, type_name(type));
    ASSERT_EQ(layers[1].fused.size(), 3u);  // both dequantize layers, then the bias add
    EXPECT_EQ(layers[1].fused[0], "dq_features");
    EXPECT_EQ(layers[1].fused[1], "dq_matrix");
    EXPECT_NE(e.plan_json().find("folded dequantize 'dq_features' and 'dq_matrix'"), std::string::npos);

    Engine with_operands = Engine::deserialize(build_serialized_engine(exposed, linear_declaration()));
    for (int rows : {1, 16, 64}) {
      auto x = uniform(static_cast<std::size_t>(rows) * 32, -1.f, 1.f, 40u + static_cast<unsigned>(rows));
      HostTensorView in{DataType::kFLOAT, {rows, 32}, x.data()};
      auto got = e.create_execution().run({{"features", in}});
      auto ref = with_operands.create_execution().run({{"features", in}});
      const auto* a = reinterpret_cast<const float*>(ref.at("dq_features_out").data.get());
      const auto* w = reinterpret_cast<const float*>(ref.at("dq_matrix_out").data.get());
      const auto* y = reinterpret_cast<const float*>(got.at("result").data.get());
      const auto* y2 = reinterpret_cast<const float*>(ref.at("result").data.get());
      double worst = 0;
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < 16; ++c) {
          double acc = plain.bias[static_cast<std::size_t>(c)];
          for (int k = 0; k < 32; ++k) acc += static_cast<double>(a[r * 32 + k]) * w[k * 16 + c];
          worst = std::max(worst, std::abs(acc - y[r * 16 + c]));
          ASSERT_EQ(y[r * 16 + c], y2[r * 16 + c]);  // the same folded product in both engines
        }
      EXPECT_LT(worst, 1e-5) << rows;
      // Quantization changed the operands: the product is not the float one.
      EXPECT_NE(a[0], x[0]);
    }
  }
}

// Two quantized layers: the second's quantize of the first's GELU output fuses into the first
// product's epilogue (per-tensor scale), and the result equals the unfused graph's exactly.
TEST(Engine, AQuantizeFusesIntoTheProducersEpilogue) {
  for (DataType q : {DataType::kINT8, DataType::kFP8}) {
    SCOPED_TRACE(type_name(q));
    auto build = [&](bool keep_apart) { return tensoracle::testing::two_quantized_layers(q, DataType::kFLOAT, keep_apart); };
    Engine fused = Engine::deserialize(build_serialized_engine(build(false), linear_declaration()));
    Engine apart = Engine::deserialize(build_serialized_engine(build(true), linear_declaration()));
    auto layers = fused.layers();
    ASSERT_EQ(layers.size(), 3u);  // q_x, then both products
    EXPECT_EQ(layers[1].fused.back(), "q_h");
    EXPECT_EQ(layers[1].fused[layers[1].fused.size() - 2], "gelu");
    EXPECT_EQ(layers[2].precision, type_name(q));
    EXPECT_EQ(apart.layers().size(), 4u);
    auto x = uniform(16 * 32, -1.f, 1.f, 63);
    HostTensorView in{DataType::kFLOAT, {16, 32}, x.data()};
    auto a = fused.create_execution().run({{"features", in}}).at("result");
    auto b = apart.create_execution().run({{"features", in}}).at("result");
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data.get(), b.data.get(), a.nbytes), 0);
  }
}

// Only per-tensor float32 scales and an untransposed first operand fold; anything else keeps
// its dequantize layers and float product.
TEST(Engine, QdqFoldingLeavesOtherPatternsAlone) {
  auto build = [](bool transpose_features, bool mixed) {
    return [=](Network& net) {
      float one = 1.f / 127;
      auto* s = net.add_constant({1}, Weights::copy_of(DataType::kFLOAT, &one, 1))->get_output(0);
      auto* x = net.add_input("features", DataType::kFLOAT, {-1, 32});
      auto* qx = net.add_quantize(x, s, DataType::kINT8)->get_output(0);
      auto* a = net.add_dequantize(qx, s, DataType::kFLOAT)->get_output(0);
      std::vector<float> m = uniform(32 * 32, -1.f, 1.f, 3);
      auto* w = net.add_constant({32, 32}, Weights::copy_of(DataType::kFLOAT, m.data(), 1024))->get_output(0);
      auto* qw = net.add_quantize(w, s, mixed ? DataType::kFP8 : DataType::kINT8)->get_output(0);
      auto* b = net.add_dequantize(qw, s, DataType::kFLOAT)->get_output(0);
      auto* y = net.add_matrix_multiply(a, transpose_features ? MatrixOperation::kTRANSPOSE : MatrixOperation::kNONE, b,
                                        MatrixOperation::kNONE)
                    ->get_output(0);
      y->set_name("result");
      net.mark_output(y);
    };
  };
  EngineBuild d;
  d.inputs["features"] = InputShape::fixed({32, 32});
  d.settings.device = "cpu";
  for (auto [t, m] : {std::pair{true, false}, std::pair{false, true}}) {
    Engine e = Engine::deserialize(build_serialized_engine(build(t, m), d));
    auto layers = e.layers();
    ASSERT_EQ(layers.back().type, "matrix_multiply");
    EXPECT_EQ(layers.back().precision, "float32");
    EXPECT_EQ(layers.size(), 4u);  // quantize, two dequantize, matrix multiply
  }
}

TEST(Engine, ExecutionChecksShapesAndBindings) {
  Linear model;
  Engine e = Engine::deserialize(build_serialized_engine(model, linear_declaration()));
  auto exec = e.create_execution();
  EXPECT_THROW(exec.enqueue(), InvalidArgument);  // dynamic input shape not set
  EXPECT_THROW(exec.set_input_shape("features", {65, 32}), InvalidArgument);  // above max
  EXPECT_THROW(exec.set_input_shape("features", {8, 31}), InvalidArgument);
  EXPECT_THROW(exec.set_input_shape("features", {8}), InvalidArgument);
  EXPECT_THROW(exec.set_input_shape("nope", {8, 32}), InvalidArgument);
  exec.set_input_shape("features", {8, 32});
  EXPECT_EQ(exec.tensor_shape("result"), (Dims{8, 16}));
  try {
    exec.enqueue();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no address for input 'features'"), std::string::npos) << e.what();
  }
  std::vector<double> wrong(8 * 32);
  EXPECT_THROW(exec.run({{"features", {DataType::kINT32, {8, 32}, wrong.data()}}}), InvalidArgument);
}

// run() binds its arrays for the call only: the caller's set_tensor_address bindings are back
// afterwards, so a later enqueue() writes where the caller said, never into a returned array.
TEST(Engine, RunLeavesTheCallersBindingsAsTheyWere) {
  Linear model;
  Engine e = Engine::deserialize(build_serialized_engine(model, linear_declaration()));
  auto exec = e.create_execution();
  auto x = uniform(4 * 32, -1.f, 1.f, 7);
  std::vector<float> mine(4 * 16, -7.f);
  exec.set_input_shape("features", {4, 32});
  exec.set_tensor_address("features", x.data());
  exec.set_tensor_address("result", mine.data());
  auto other = uniform(4 * 32, -1.f, 1.f, 8);
  auto out = exec.run({{"features", {DataType::kFLOAT, {4, 32}, other.data()}}});
  const float* returned = reinterpret_cast<const float*>(out.at("result").data.get());
  std::vector<float> before(returned, returned + 4 * 16);
  EXPECT_EQ(mine, std::vector<float>(4 * 16, -7.f));  // run() wrote its own array
  exec.enqueue();                                      // the caller's bindings: x -> mine
  EXPECT_EQ(std::vector<float>(returned, returned + 4 * 16), before);
  auto ref = model.reference(x, 4);
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(mine[i], ref[i], 2e-5f) << i;

  // Without earlier bindings, enqueue() after run() asks for addresses again.
  auto fresh = e.create_execution();
  fresh.run({{"features", {DataType::kFLOAT, {4, 32}, other.data()}}});
  EXPECT_THROW(fresh.enqueue(), InvalidArgument);
}

TEST(Engine, ConcurrentExecutionsShareOneEngine) {
  Linear model;
  Engine e = Engine::deserialize(build_serialized_engine(model, linear_declaration()));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto exec = e.create_execution();
      int rows = 8 + t;
      auto x = uniform(static_cast<std::size_t>(rows) * 32, -1.f, 1.f, 100u + static_cast<unsigned>(t));
      auto ref = model.reference(x, rows);
      bool good = true;
      for (int it = 0; it < 20; ++it) {
        auto out = exec.run({{"features", {DataType::kFLOAT, {rows, 32}, x.data()}}});
        const float* got = reinterpret_cast<const float*>(out.at("result").data.get());
        for (std::size_t i = 0; i < ref.size(); ++i) good = good && std::fabs(got[i] - ref[i]) < 2e-5f;
      }
      ok[static_cast<std::size_t>(t)] = good;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

// workspace_limit bounds activations plus scratch: an engine builds at exactly what it needs,
// and one byte less is a BuildError that says what did not fit (the activations, or the layer
// with the most scratch).
TEST(Engine, WorkspaceLimitCoversActivationsAndScratch) {
  static std::vector<float> w = uniform(8 * 8 * 3 * 3, -0.3f, 0.3f, 71);
  auto graph = [](Network& net) {
    Tensor* t = net.add_input("x", DataType::kFLOAT, {-1, 8, 10, 10});
    for (const char* name : {"conv_a", "conv_b"}) {
      auto* l = net.add_convolution_nd(t, 8, {3, 3}, Weights(DataType::kFLOAT, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                       Weights());
      ConvolutionParams p = l->get();
      p.pre_padding = p.post_padding = {1, 1};
      l->set(p);
      l->set_name(name);
      t = net.add_activation(l->get_output(0), ActivationType::kRELU)->get_output(0);
    }
    t->set_name("y");
    net.mark_output(t);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1, 8, 10, 10}, {2, 8, 10, 10}, {4, 8, 10, 10});
  d.settings.device = "cpu";
  auto reference = Engine::deserialize(build_serialized_engine(graph, d));
  const auto memory = nlohmann::json::parse(reference.plan_json())["memory"];
  const auto arena = memory["arena_bytes"].get<std::uint64_t>(), scratch = memory["workspace_bytes"].get<std::uint64_t>();
  ASSERT_GT(arena, 0u);    // conv_a's result
  ASSERT_GT(scratch, 0u);  // the 3x3 convolutions' unfolded input
  d.settings.workspace_limit = arena + scratch;
  auto exact = Engine::deserialize(build_serialized_engine(graph, d));
  auto x = uniform(4 * 8 * 10 * 10, -1.f, 1.f, 72);
  const std::map<std::string, HostTensorView> in = {{"x", {DataType::kFLOAT, {4, 8, 10, 10}, x.data()}}};
  auto a = reference.create_execution().run(in), b = exact.create_execution().run(in);
  ASSERT_EQ(a.at("y").nbytes, b.at("y").nbytes);
  EXPECT_EQ(std::memcmp(a.at("y").data.get(), b.at("y").data.get(), a.at("y").nbytes), 0);

  auto error_of = [&](std::uint64_t limit) {
    d.settings.workspace_limit = limit;
    try {
      build_serialized_engine(graph, d);
    } catch (const BuildError& e) {
      return std::string(e.what());
    }
    return std::string("(built)");
  };
  const std::string over_scratch = error_of(arena + scratch - 1);
  EXPECT_NE(over_scratch.find("layer 'conv_"), std::string::npos) << over_scratch;
  EXPECT_NE(over_scratch.find("needs " + std::to_string(scratch) + " bytes of scratch"), std::string::npos) << over_scratch;
  EXPECT_NE(over_scratch.find("workspace_limit " + std::to_string(arena + scratch - 1)), std::string::npos) << over_scratch;
  const std::string over_arena = error_of(arena - 1);
  EXPECT_NE(over_arena.find("activations need " + std::to_string(arena) + " bytes"), std::string::npos) << over_arena;
}

TEST(Engine, DeclarationErrors) {
  Linear model;
  auto expect = [&](EngineBuild d, const char* needle) {
    try {
      build_serialized_engine(model, d);
      FAIL() << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EngineBuild d = linear_declaration();
  d.inputs.clear();
  expect(d, "input 'features' (-1, 32) has no InputShape");
  d = linear_declaration();
  d.inputs["other"] = InputShape::fixed({1});
  expect(d, "names input 'other', which the network does not have");
  d = linear_declaration();
  d.inputs["features"] = InputShape::fixed({4, 32, 1});
  expect(d, "has rank 3");
  d.inputs["features"] = InputShape::fixed({4, 31});
  expect(d, "contradicts static dimension 1 = 32");
  d.inputs["features"] = InputShape::ranged({8, 32}, {4, 32}, {16, 32});
  expect(d, "needs min <= opt <= max");
  d = linear_declaration();
  d.settings.tf32 = true;
  expect(d, "tf32=true is not allowed");
  d = linear_declaration();
  d.settings.optimization_level = 6;
  expect(d, "optimization_level 6 is outside 0..5");
  d = linear_declaration();
  d.settings.device = "tpu";
  expect(d, "device 'tpu'");
  d = linear_declaration();
  d.settings.device = "cuda:99";
  EXPECT_THROW(build_serialized_engine(model, d), BuildError);
  d = linear_declaration();
  d.settings.workspace_limit = 16;
  EXPECT_THROW(build_serialized_engine(model, d), BuildError);
}

TEST(Engine, FileRoundTripAndInspection) {
  Linear model;
  auto bytes = build_serialized_engine(model, linear_declaration());
  tensoracle::testing::TempDir dir;
  auto path = dir.path / "linear.engine";
  tensoracle::testing::write_bytes(path, bytes);
  Engine a = Engine::load(path);
  Engine b = Engine::deserialize(bytes);
  EXPECT_EQ(a.plan_json(), b.plan_json());
  EXPECT_NE(a.plan_json().find("\"arena_bytes\""), std::string::npos);
  EXPECT_NE(a.target_json().find("\"backend\":\"cpu\""), std::string::npos);
  EXPECT_EQ(a.weight_bytes(), (32 * 16 + 16) * 4u);
  // The same network and declaration give the same bytes.
  EXPECT_EQ(build_serialized_engine(model, linear_declaration()), bytes);
}

TEST(Engine, EveryFlippedByteIsCorruptAndTruncationToo) {
  Linear model;
  auto bytes = build_serialized_engine(model, linear_declaration());
  int corrupt = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] ^= std::byte{0x01};
    try {
      Engine::deserialize(copy);
      ADD_FAILURE() << "flipping byte " << i << " went unnoticed";
    } catch (const CorruptEngineError&) {
      ++corrupt;
    }
  }
  EXPECT_EQ(corrupt, static_cast<int>(bytes.size()));
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(Engine::deserialize(std::span(bytes).first(n)), CorruptEngineError) << n;
  // A valid safetensors file that is not an engine.
  std::vector<float> w(4, 1.f);
  auto plain = safetensors::serialize({{"w", safetensors::Dtype::F32, {4}, std::as_bytes(std::span(w))}});
  EXPECT_THROW(Engine::deserialize(plain), CorruptEngineError);
}

// A plan with a valid digest that says something the runtime cannot honour safely is corrupt:
// activations outside the arena or off its alignment, a value with no place, an I/O table that
// binds the wrong value, a fraction where an integer belongs, a float parameter beyond float32
// (each found by fuzz_engine_plan as undefined behaviour or a crash before these checks).
TEST(Engine, PlansThatMisplaceMemoryOrBindTheWrongValuesAreCorrupt) {
  // Two products with a ReLU between them: the first one's result lives in the arena.
  std::vector<float> w(8 * 8, 0.125f);
  auto graph = [&](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2, 8});
    auto* c = net.add_constant({8, 8}, Weights(DataType::kFLOAT, w.data(), 64, nullptr))->get_output(0);
    auto* h = net.add_matrix_multiply(x, MatrixOperation::kNONE, c, MatrixOperation::kNONE)->get_output(0);
    h = net.add_activation(h, ActivationType::kRELU)->get_output(0);
    auto* y = net.add_matrix_multiply(h, MatrixOperation::kNONE, c, MatrixOperation::kNONE)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({2, 8});
  d.settings.device = "cpu";
  auto bytes = build_serialized_engine(graph, d);
  plan::Plan p = plan::read_engine(bytes, "test", nullptr);
  int in_arena = -1;
  for (std::size_t v = 0; v < p.graph.values.size() && in_arena < 0; ++v)
    if (p.memory.offsets[v] >= 0) in_arena = static_cast<int>(v);
  ASSERT_GE(in_arena, 0);
  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<std::string, Edit>> edits = {
      {"not a multiple of 256", [&](nlohmann::json& j) { j["values"][in_arena]["arena_offset"] = 5; }},
      {"does not fit", [&](nlohmann::json& j) { j["values"][in_arena]["arena_offset"] = 1 << 20; }},
      {"does not fit", [&](nlohmann::json& j) { j["values"][in_arena]["max_bytes"] = ~std::uint64_t{0}; }},
      {"has no place in the arena", [&](nlohmann::json& j) { j["values"][in_arena]["arena_offset"] = -1; }},
      {"has an arena offset it cannot use", [&](nlohmann::json& j) { j["values"][0]["arena_offset"] = 0; }},
      {"does not match value", [&](nlohmann::json& j) { j["io"][0]["value"] = 1; }},
      {"does not match value", [&](nlohmann::json& j) { j["io"][0]["type"] = "float16"; }},
      {"does not list", [&](nlohmann::json& j) { j["io"].erase(j["io"].size() - 1); }},
      {"needs an integer", [&](nlohmann::json& j) { j["values"][in_arena]["arena_offset"] = 7.7e47; }},
      {"beyond float32's range", [&](nlohmann::json& j) {
         for (auto& n : j["nodes"])
           for (auto& e : n["epilogue"])
             if (e["params"].contains("alpha")) e["params"]["alpha"] = 1e300;
         j["nodes"][0]["params"]["alpha"] = 1e300;
       }},
  };
  expect_corrupt(p, edits);
}

// A pooling's output stored channels-last (Value::layout) is taken only where the builder
// stores it so: over a value stored packed, or with a network output as its result, it is
// refused.
TEST(Engine, AChannelsLastPoolingOverPackedValuesIsCorrupt) {
  auto graph = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {1, 2, 6, 6});
    auto* pool = net.add_pooling_nd(x, PoolingType::kMAX, Dims{2, 2});
    pool->set_name("pool");
    pool->get_output(0)->set_name("y");
    net.mark_output(pool->get_output(0));
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({1, 2, 6, 6});
  d.settings.device = "cpu";
  const auto built = build_serialized_engine(graph, d);  // the plan's weights borrow from it
  plan::Plan p = plan::read_engine(built, "test", nullptr);
  bool found = false;
  for (auto& n : p.graph.nodes)
    if (n.name == "pool") {
      EXPECT_EQ(n.tactic, graph::Tactic("cpu.pooling"));
      found = true;
    }
  ASSERT_TRUE(found);
  // The network output channels-last: the plan's own check (graph::verify).
  auto edit = [](nlohmann::json& j) {
    for (auto& v : j["values"])
      if (v["name"] == "y") v["layout"] = "channels_last";
  };
  try {
    Engine::deserialize(plan::write_engine_with(p, edit));
    ADD_FAILURE() << "accepted a channels-last network output";
  } catch (const CorruptEngineError& e) {
    EXPECT_NE(std::string(e.what()).find("is stored channels-last but is a network output"), std::string::npos) << e.what();
  }
  // An internal value: the pooling's output read by a second pooling, over a packed input.
  auto two = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {1, 2, 8, 8});
    auto* pool = net.add_pooling_nd(x, PoolingType::kMAX, Dims{2, 2});
    pool->set_name("pool");
    pool->get_output(0)->set_name("mid");
    auto* second = net.add_pooling_nd(pool->get_output(0), PoolingType::kMAX, Dims{2, 2});
    second->get_output(0)->set_name("y");
    net.mark_output(second->get_output(0));
  };
  d.inputs["x"] = InputShape::fixed({1, 2, 8, 8});
  const auto built2 = build_serialized_engine(two, d);
  plan::Plan p2 = plan::read_engine(built2, "test", nullptr);
  for (const auto& v : p2.graph.values) EXPECT_EQ(v.layout, graph::Layout::kLinear) << v.name;
  try {
    Engine::deserialize(plan::write_engine_with(p2, [](nlohmann::json& j) {
      for (auto& v : j["values"])
        if (v["name"] == "mid") v["layout"] = "channels_last";
    }));
    ADD_FAILURE() << "accepted a channels-last pooling over a packed value";
  } catch (const CorruptEngineError& e) {
    EXPECT_NE(std::string(e.what()).find("its output is stored channels-last"), std::string::npos) << e.what();
  }
  // A layout the format does not have.
  EXPECT_THROW(Engine::deserialize(plan::write_engine_with(p2, [](nlohmann::json& j) { j["values"][1]["layout"] = "nhwc"; })),
               CorruptEngineError);
}

TEST(Engine, OtherVersionsAndTargetsAreIncompatible) {
  Linear model;
  auto bytes = build_serialized_engine(model, linear_declaration());
  plan::Plan p = plan::read_engine(bytes, "test", nullptr);
  auto v2 = plan::write_engine(p, kEngineFormatVersion + 1);
  try {
    Engine::deserialize(v2);
    FAIL();
  } catch (const IncompatibleEngineError& e) {
    EXPECT_NE(std::string(e.what()).find("engine format version " + std::to_string(kEngineFormatVersion + 1)), std::string::npos) << e.what();
  }
  plan::Plan cuda = p;
  cuda.target["backend"] = "cuda";
  EXPECT_THROW(Engine::deserialize(plan::write_engine(cuda)), IncompatibleEngineError);
  plan::Plan arm = p;
  arm.target["arch"] = "riscv128";
  EXPECT_THROW(Engine::deserialize(plan::write_engine(arm)), IncompatibleEngineError);
}

// A reshape whose dims come from the network's own shape tensors: shape(x)[0:2] ++ [12, 32],
// as transformer code splits heads. Shape inference evaluates the shape tensors on the host,
// at build time (the profile's corners) and at every new input shape.
TEST(Engine, ReshapeByShapeTensorsFollowsTheInputShape) {
  std::vector<std::int64_t> first_two{0, 1}, heads{12, 32};
  auto graph = [&](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {-1, -1, 384});
    auto* s = net.add_shape(x)->get_output(0);
    EXPECT_EQ(s->type(), DataType::kINT64);
    EXPECT_EQ(s->dims(), (Dims{3}));
    auto* idx = net.add_constant({2}, Weights(DataType::kINT64, first_two.data(), 2, nullptr))->get_output(0);
    auto* h = net.add_constant({2}, Weights(DataType::kINT64, heads.data(), 2, nullptr))->get_output(0);
    auto* bs = net.add_gather(s, idx, 0)->get_output(0);
    auto* dims = net.add_concatenation({bs, h})->get_output(0);
    auto* r = net.add_shuffle(x);
    net.set_layer_input(r, 1, dims);
    EXPECT_EQ(r->get_output(0)->dims(), (Dims{-1, -1, -1, -1}));  // known at run time
    auto* y = net.add_activation(r->get_output(0), ActivationType::kRELU)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1, 1, 384}, {2, 8, 384}, {4, 16, 384});
  d.settings.device = "cpu";
  Engine e = Engine::deserialize(build_serialized_engine(graph, d));
  EXPECT_EQ(e.io_tensor("y").max, (Dims{4, 16, 12, 32}));
  auto exec = e.create_execution();
  for (auto [b, s] : {std::pair{2, 8}, std::pair{4, 16}, std::pair{1, 3}}) {
    auto x = uniform(static_cast<std::size_t>(b * s * 384), -1.f, 1.f, static_cast<unsigned>(b * 100 + s));
    auto out = exec.run({{"x", {DataType::kFLOAT, {b, s, 384}, x.data()}}});
    const auto& y = out.at("y");
    ASSERT_EQ(y.dims, (Dims{b, s, 12, 32}));
    const float* got = reinterpret_cast<const float*>(y.data.get());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], std::max(x[i], 0.f)) << i;
  }
  // A shape tensor of the wrong kind is refused when it is set.
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 6});
  auto* r = net.add_shuffle(x);
  EXPECT_THROW(net.set_layer_input(r, 1, x), InvalidArgument);
}

#ifdef TENSORACLE_CLI_PATH
// `tensoracle inspect` reads an engine's plan without opening it on a backend: an engine built
// for a GPU this machine lacks is still shown (and one that large is not uploaded to look at).
TEST(Engine, InspectShowsAnEngineBuiltForAnotherDevice) {
  Linear model;
  const auto built = build_serialized_engine(model, linear_declaration());  // the plan's weights borrow from it
  plan::Plan p = plan::read_engine(built, "test", nullptr);
  p.target = {{"backend", "cuda"}, {"device", "Imaginary GPU"}, {"compute_capability", "12.7"}};
  auto bytes = plan::write_engine(p);
  const auto path = std::filesystem::temp_directory_path() / ("inspect_cuda_" + std::to_string(::getpid()) + ".engine");
  tensoracle::testing::write_bytes(path, bytes);
  EXPECT_THROW(Engine::load(path), IncompatibleEngineError);  // running it is another matter
  std::string out;
  {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen((std::string(TENSORACLE_CLI_PATH) + " inspect " + path.string() + " 2>&1").c_str(), "r"), ::pclose);
    ASSERT_TRUE(pipe);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  }
  std::filesystem::remove(path);
  EXPECT_NE(out.find("target:   cuda (Imaginary GPU, compute capability 12.7)"), std::string::npos) << out;
  EXPECT_NE(out.find("nodes:    1 (after fusion)"), std::string::npos) << out;
}
#endif

// An attention node of the sequence-major layout (the builder's fusion of attention written
// as layers over [B, S, N·H] rows) is written with its "rows" object; an engine file whose rows
// do not fit its tensors is refused when it is opened, naming what does not fit.
TEST(Engine, AttentionRowsThatDoNotFitAreCorrupt) {
  auto graph = [](Network& net) {
    auto heads = [&](const char* name) {  // [1, 5, 32] -> [1, 2, 5, 16]
      auto* s = net.add_shuffle(net.add_input(name, DataType::kFLOAT, {1, 5, 32}));
      s->set_reshape_dims(Dims{0, 0, 2, 16});
      s->set_second_transpose(Permutation{{0, 2, 1, 3, 4, 5, 6, 7}});
      return s->get_output(0);
    };
    auto* q = heads("xq");
    auto* k = heads("xk");
    auto* v = heads("xv");
    auto* scores = net.add_matrix_multiply(q, MatrixOperation::kNONE, k, MatrixOperation::kTRANSPOSE)->get_output(0);
    auto* sm = net.add_softmax(scores);
    sm->set(SoftmaxParams{1u << 3});
    auto* pv = net.add_matrix_multiply(sm->get_output(0), MatrixOperation::kNONE, v, MatrixOperation::kNONE);
    pv->set_name("attn");
    auto* merge = net.add_shuffle(pv->get_output(0));
    merge->set_first_transpose(Permutation{{0, 2, 1, 3, 4, 5, 6, 7}});
    merge->set_reshape_dims(Dims{0, 0, 32});
    merge->get_output(0)->set_name("y");
    net.mark_output(merge->get_output(0));
  };
  EngineBuild d;
  for (const char* n : {"xq", "xk", "xv"}) d.inputs[n] = InputShape::fixed({1, 5, 32});
  d.settings.device = "cpu";
  const auto built = build_serialized_engine(graph, d);
  auto engine = Engine::deserialize(built);
  const auto layers = engine.layers();
  if (layers.size() != 1)  // the CPU fuses attention where its AVX-512 products run (head size 16 here)
    GTEST_SKIP() << "this CPU keeps attention as its layers (no AVX-512): no attention node to edit";
  ASSERT_EQ(layers[0].type, "attention");
  plan::Plan p = plan::read_engine(built, "test", nullptr);
  auto attn = [](nlohmann::json& j) -> nlohmann::json& {
    for (auto& n : j["nodes"])
      if (n["name"] == "attn") return n["params"];
    throw std::runtime_error("no attention node");
  };
  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<std::string, Edit>> edits = {
      {"need 40", [&](nlohmann::json& j) { attn(j)["rows"]["offsets"][2] = 8; }},
      {"beyond 2^48", [&](nlohmann::json& j) { attn(j)["rows"]["offsets"][1] = 9223372036854775807LL; }},
      {"must be 3 numbers", [&](nlohmann::json& j) { attn(j)["rows"]["offsets"] = {0, 16}; }},
      {"must be positive", [&](nlohmann::json& j) { attn(j)["rows"]["heads"] = 0; }},
      {"key heads must divide", [&](nlohmann::json& j) { attn(j)["rows"]["kv_heads"] = 3; }},
      {"need 48", [&](nlohmann::json& j) { attn(j)["rows"]["head_size"] = 24; }},
      {"rank-4", [&](nlohmann::json& j) { attn(j).erase("rows"); }},
  };
  expect_corrupt(p, edits);
}
