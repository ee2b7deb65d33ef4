// The CUDA backend end to end (label gpu: needs a CUDA device and libtensoracle_cuda.so, which
// CTest points at with TENSORACLE_CUDA_BACKEND): build, run() with host arrays, enqueue on
// device buffers and a caller's stream, CUDA-graph replay, reopening, device identity, and the
// errors for what the backend refuses.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "cuda_test_helpers.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

using namespace tensoracle;
using tensoracle::testing::fixed_engine;
using tensoracle::testing::uniform;

namespace {

// features (rows x 64) @ matrix (64 x 48) + bias, then `act`.
struct Linear {
  ActivationType act = ActivationType::kRELU;
  std::vector<float> matrix = uniform(64 * 48, -0.25f, 0.25f, 3);
  std::vector<float> bias = uniform(48, -0.5f, 0.5f, 4);
  void operator()(Network& net) const {
    auto* x = net.add_input("features", DataType::kFLOAT, {-1, 64});
    auto* w = net.add_constant({64, 48}, Weights(DataType::kFLOAT, matrix.data(), 64 * 48, nullptr))->get_output(0);
    auto* b = net.add_constant({1, 48}, Weights(DataType::kFLOAT, bias.data(), 48, nullptr))->get_output(0);
    auto* y = net.add_matrix_multiply(x, MatrixOperation::kNONE, w, MatrixOperation::kNONE)->get_output(0);
    y = net.add_elementwise(y, b, ElementWiseOperation::kSUM)->get_output(0);
    y = net.add_activation(y, act)->get_output(0);
    y->set_name("result");
    net.mark_output(y);
  }
  float reference(const std::vector<float>& x, int r, int c) const {
    double acc = bias[static_cast<std::size_t>(c)];
    for (int k = 0; k < 64; ++k)
      acc += static_cast<double>(x[static_cast<std::size_t>(r * 64 + k)]) * matrix[static_cast<std::size_t>(k * 48 + c)];
    if (act == ActivationType::kRELU) return static_cast<float>(std::max(acc, 0.0));
    return static_cast<float>(0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0))));
  }
};

EngineBuild declaration(const char* device) {
  EngineBuild d;
  d.inputs["features"] = InputShape::ranged({1, 64}, {16, 64}, {128, 64});
  d.settings.device = device;
  return d;
}

void expect_close(const float* got, const Linear& m, const std::vector<float>& x, int rows) {
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 48; ++c) worst = std::max(worst, std::fabs(double(got[r * 48 + c]) - m.reference(x, r, c)));
  EXPECT_LT(worst, 1e-5) << rows << " rows";  // float32 throughout: no TF32 (that would be ~1e-3)
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

}  // namespace

TEST(Cuda, BuildsRunsWithHostArraysAndFusesTheEpilogue) {
  for (auto act : {ActivationType::kRELU, ActivationType::kGELU_ERF}) {
    Linear m;
    m.act = act;
    Engine e = Engine::deserialize(build_serialized_engine(m, declaration("cuda:0")));
    EXPECT_EQ(e.device(), "cuda:0");
    auto target = nlohmann::json::parse(e.target_json());
    EXPECT_EQ(target["backend"], "cuda");
    EXPECT_FALSE(target["compute_capability"].get<std::string>().empty());
    EXPECT_GT(target["cublaslt"].get<int>(), 0);
    auto layers = e.layers();
    ASSERT_EQ(layers.size(), 1u);
    // ReLU goes into cuBLASLt's epilogue with the bias; GELU (erf) runs as a pass after it. At
    // the default level (3) the GEMM algorithm was timed and stored.
    const auto& tactic = layers[0].tactic;
    EXPECT_EQ(tactic.substr(0, tactic.find(" algo:")),
              act == ActivationType::kRELU ? "cuda.gemm.cublaslt epilogue:2" : "cuda.gemm.cublaslt epilogue:1");
    EXPECT_NE(tactic.find(" algo:"), std::string::npos) << tactic;
    auto exec = e.create_execution();
    for (int rows : {1, 16, 128, 7}) {
      auto x = uniform(static_cast<std::size_t>(rows) * 64, -1.f, 1.f, static_cast<unsigned>(rows));
      auto out = exec.run({{"features", {DataType::kFLOAT, {rows, 64}, x.data()}}});
      const auto& r = out.at("result");
      ASSERT_EQ(r.dims, (Dims{rows, 48}));
      expect_close(reinterpret_cast<const float*>(r.data.get()), m, x, rows);
    }
  }
}

TEST(Cuda, EnqueueOnDeviceBuffersReplaysAGraphAndFollowsNewData) {
  Linear m;
  Engine e = Engine::deserialize(build_serialized_engine(m, declaration("cuda:0")));
  auto exec = e.create_execution();
  EXPECT_TRUE(exec.graph_replay());
  const int rows = 32;
  DeviceBuffer x(rows * 64 * 4), y(rows * 48 * 4);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  exec.set_input_shape("features", {rows, 64});
  exec.set_tensor_address("features", x.p);
  exec.set_tensor_address("result", y.p);
  std::vector<float> out(rows * 48);
  // Eager first, then captured, then replayed: each with new input values.
  for (unsigned round = 0; round < 5; ++round) {
    auto host = uniform(rows * 64, -1.f, 1.f, 100 + round);
    ASSERT_EQ(cudaMemcpyAsync(x.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
    exec.enqueue(stream);
    ASSERT_EQ(cudaMemcpyAsync(out.data(), y.p, out.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_close(out.data(), m, host, rows);
  }
  // A new shape re-runs eagerly (and records again later).
  exec.set_input_shape("features", {5, 64});
  auto host = uniform(5 * 64, -1.f, 1.f, 7);
  cudaMemcpy(x.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  exec.enqueue(stream);
  cudaMemcpyAsync(out.data(), y.p, 5 * 48 * 4, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  expect_close(out.data(), m, host, 5);
  cudaStreamDestroy(stream);
}

TEST(Cuda, LevelZeroTakesTheHeuristicsChoice) {
  Linear m;
  auto d = declaration("cuda:0");
  d.settings.optimization_level = 0;
  Engine e = Engine::deserialize(build_serialized_engine(m, d));
  EXPECT_EQ(e.layers()[0].tactic, "cuda.gemm.cublaslt epilogue:2");
  auto x = uniform(7 * 64, -1.f, 1.f, 11);
  auto out = e.create_execution().run({{"features", {DataType::kFLOAT, {7, 64}, x.data()}}});
  expect_close(reinterpret_cast<const float*>(out.at("result").data.get()), m, x, 7);
}

// A workspace limit bounds the scratch tactics may use: cuBLASLt gets what the limit leaves
// beside the node's other scratch (here the GELU pass's buffers), stored in the tactic; the
// results do not change. A limit below what the node cannot do without is a BuildError naming
// the layer.
TEST(Cuda, WorkspaceLimitBoundsTheGemmsScratch) {
  Linear m;
  m.act = ActivationType::kGELU_ERF;
  for (int level : {0, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    auto d = declaration("cuda:0");
    d.settings.optimization_level = level;
    const auto unlimited = nlohmann::json::parse(Engine::deserialize(build_serialized_engine(m, d)).plan_json())["memory"];
    EXPECT_GE(unlimited["workspace_bytes"].get<std::uint64_t>(), std::uint64_t{32} << 20);
    d.settings.workspace_limit = 1 << 20;
    Engine e = Engine::deserialize(build_serialized_engine(m, d));
    const auto memory = nlohmann::json::parse(e.plan_json())["memory"];
    const auto arena = memory["arena_bytes"].get<std::uint64_t>(), scratch = memory["workspace_bytes"].get<std::uint64_t>();
    EXPECT_LE(arena + scratch, std::uint64_t{1} << 20);
    const std::string tactic = e.layers()[0].tactic;
    const auto at = tactic.find(" ws:");
    ASSERT_NE(at, std::string::npos) << tactic;
    EXPECT_LE(std::stoull(tactic.substr(at + 4)), (std::uint64_t{1} << 20) - arena) << tactic;
    EXPECT_EQ(level >= 2, tactic.find(" algo:") != std::string::npos) << tactic;
    auto exec = e.create_execution();
    for (int rows : {1, 16, 128, 7}) {
      auto x = uniform(static_cast<std::size_t>(rows) * 64, -1.f, 1.f, 60u + static_cast<unsigned>(rows));
      auto out = exec.run({{"features", {DataType::kFLOAT, {rows, 64}, x.data()}}});
      expect_close(reinterpret_cast<const float*>(out.at("result").data.get()), m, x, rows);
    }
    // The GELU pass's scratch (128 x 48 floats) does not fit in 4 KiB.
    d.settings.workspace_limit = 4096;
    try {
      build_serialized_engine(m, d);
      ADD_FAILURE() << "a 4 KiB workspace limit built";
    } catch (const BuildError& err) {
      EXPECT_NE(std::string(err.what()).find("workspace_limit 4096"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("layer '"), std::string::npos) << err.what();
    }
  }
}

TEST(Cuda, ReopensAndRefusesOtherDevices) {
  Linear m;
  auto bytes = build_serialized_engine(m, declaration("cuda:0"));
  Engine a = Engine::deserialize(bytes);
  Engine b = Engine::deserialize(bytes);
  auto x = uniform(3 * 64, -1.f, 1.f, 9);
  auto ra = a.create_execution().run({{"features", {DataType::kFLOAT, {3, 64}, x.data()}}});
  auto rb = b.create_execution().run({{"features", {DataType::kFLOAT, {3, 64}, x.data()}}});
  EXPECT_EQ(std::memcmp(ra.at("result").data.get(), rb.at("result").data.get(), 3 * 48 * 4), 0);
  EXPECT_THROW(build_serialized_engine(m, declaration("cuda:99")), BuildError);
  // Another compute capability: refused when opened, naming both devices.
  plan::Plan p = plan::read_engine(bytes, "test", nullptr);
  p.target["compute_capability"] = "1.0";
  p.target["device"] = "Imaginary GPU";
  try {
    Engine::deserialize(plan::write_engine(p));
    FAIL() << "expected IncompatibleEngineError";
  } catch (const IncompatibleEngineError& e) {
    EXPECT_NE(std::string(e.what()).find("Imaginary GPU (compute capability 1.0)"), std::string::npos) << e.what();
  }
}

// A plugin's CUDA enqueue: device pointers and the execution's stream. Both outputs marked, or
// only the second (the first then goes into the node's device workspace); results equal the
// CPU engine's bit for bit (one multiply and one add, not fused on either side).
TEST(Cuda, PluginLayersRunTheirCudaEnqueueAndMatchTheCpu) {
  load_plugin_libraries({TENSORACLE_TEST_CUDA_PLUGINS});
  for (bool both : {true, false}) {
    auto graph = [both](Network& net) {
      Tensor* x = net.add_input("x", DataType::kFLOAT, {-1, 100});
      auto* l = net.add_plugin("Axpb", "1", {x}, {PluginField::float32("a", {1.5f}), PluginField::float32("b", {-0.25f})},
                               "tensoracle.tests.cuda");
      l->get_output(1)->set_name("z");
      net.mark_output(l->get_output(1));
      if (both) {
        l->get_output(0)->set_name("y");
        net.mark_output(l->get_output(0));
      }
    };
    std::vector<std::vector<float>> outs(2);
    for (int dev = 0; dev < 2; ++dev) {
      EngineBuild d;
      d.inputs["x"] = InputShape::ranged({1, 100}, {4, 100}, {9, 100});
      d.settings.device = dev == 0 ? "cpu" : "cuda:0";
      Engine e = Engine::deserialize(build_serialized_engine(graph, d));
      auto exec = e.create_execution();
      for (int rows : {9, 2}) {
        auto x = uniform(static_cast<std::size_t>(rows) * 100, -1.f, 1.f, 70u + static_cast<unsigned>(rows));
        auto r = exec.run({{"x", {DataType::kFLOAT, {rows, 100}, x.data()}}});
        for (const char* name : {"y", "z"}) {
          if (!r.count(name)) continue;
          const auto* p = reinterpret_cast<const float*>(r.at(name).data.get());
          outs[static_cast<std::size_t>(dev)].insert(outs[static_cast<std::size_t>(dev)].end(), p, p + rows * 100);
        }
      }
    }
    ASSERT_EQ(outs[0].size(), outs[1].size());
    ASSERT_FALSE(outs[0].empty());
    EXPECT_EQ(outs[0], outs[1]);
  }
}

// A plugin without a CUDA implementation cannot be built for a CUDA device.
TEST(Cuda, APluginWithoutACudaImplementationIsABuildErrorNamingLayerAndBackend) {
  load_plugin_libraries({TENSORACLE_TEST_PLUGINS});
  auto graph = [](Network& net) {
    Tensor* x = net.add_input("x", DataType::kFLOAT, {4});
    Tensor* y = net.add_plugin("MinMax", "1", {x}, {}, "tensoracle.tests")->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({4});
  d.settings.device = "cuda:0";
  try {
    build_serialized_engine(graph, d);
    FAIL() << "built";
  } catch (const BuildError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer 'plugin_1"), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA implementation"), std::string::npos) << m;
  }
}

// Executions of one engine on four threads, each with its own stream and device buffers:
// eagerly, then replaying its CUDA graph, and through run() with host arrays; every result
// equals the one-thread result bit for bit. The network mixes the backend's kinds of kernels:
// convolutions (cuDNN where it is there), a GEMM (cuBLASLt), shuffles, a softmax and a reduction.
TEST(Cuda, ExecutionsOnManyThreadsAndStreamsMatchOneThread) {
  static const std::vector<float> w = uniform(16 * 16 * 9, -0.2f, 0.2f, 7), b = uniform(16, -0.1f, 0.1f, 8),
                                  m = uniform(16 * 144 * 64, -0.05f, 0.05f, 9);
  auto graph = [&](Network& net) {
    Tensor* t = net.add_input("x", DataType::kFLOAT, {2, 16, 12, 12});
    for (int i = 0; i < 2; ++i) {
      auto* l = net.add_convolution_nd(t, 16, {3, 3}, Weights(DataType::kFLOAT, w.data(), 16 * 16 * 9, nullptr),
                                       Weights(DataType::kFLOAT, b.data(), 16, nullptr));
      ConvolutionParams p = l->get();
      p.pre_padding = p.post_padding = {1, 1};
      l->set(p);
      t = net.add_activation(l->get_output(0), ActivationType::kRELU)->get_output(0);
    }
    auto* flat = net.add_shuffle(t);
    flat->set_reshape_dims(Dims{2, 16 * 144});
    auto* c = net.add_constant({16 * 144, 64}, Weights(DataType::kFLOAT, m.data(), 16 * 144 * 64, nullptr))->get_output(0);
    auto* y = net.add_matrix_multiply(flat->get_output(0), MatrixOperation::kNONE, c, MatrixOperation::kNONE)->get_output(0);
    y = net.add_softmax(y)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
    auto* s = net.add_reduce(t, ReduceOperation::kSUM, 0x6, false)->get_output(0);
    s->set_name("s");
    net.mark_output(s);
  };
  const Dims dims{2, 16, 12, 12};
  Engine e = Engine::deserialize(fixed_engine(graph, dims, "cuda:0", 3));
  constexpr int kThreads = 4, kRounds = 200;
  const std::size_t in_n = static_cast<std::size_t>(dims.volume());
  std::size_t y_n = 0, s_n = 0;
  std::vector<std::vector<float>> inputs, expected_y, expected_s;
  {
    auto x = e.create_execution();
    x.set_input_shape("x", dims);
    y_n = static_cast<std::size_t>(x.tensor_shape("y").volume());  // [2, 64]
    s_n = static_cast<std::size_t>(x.tensor_shape("s").volume());  // [2, 12]: the sum over axes 1 and 2
    ASSERT_EQ(y_n, 2u * 64);
    ASSERT_EQ(s_n, 2u * 12);
    for (int t = 0; t < kThreads; ++t) {
      inputs.push_back(uniform(in_n, -1.f, 1.f, 300u + static_cast<unsigned>(t)));
      auto out = x.run({{"x", {DataType::kFLOAT, dims, inputs.back().data()}}});
      const auto* y = reinterpret_cast<const float*>(out.at("y").data.get());
      const auto* s = reinterpret_cast<const float*>(out.at("s").data.get());
      expected_y.emplace_back(y, y + y_n);
      expected_s.emplace_back(s, s + s_n);
    }
  }
  std::atomic<int> wrong{0}, failed{0};
  std::string first_wrong;  // written by the first thread to see a wrong result
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const auto i = static_cast<std::size_t>(t);
      try {
        auto x = e.create_execution();
        cudaStream_t stream;
        if (cudaStreamCreate(&stream) != cudaSuccess) return void(++failed);
        DeviceBuffer dx(in_n * 4), dy(y_n * 4), ds(s_n * 4);
        x.set_input_shape("x", dims);
        x.set_tensor_address("x", dx.p);
        x.set_tensor_address("y", dy.p);
        x.set_tensor_address("s", ds.p);
        std::vector<float> y(y_n), s(s_n);
        for (int r = 0; r < kRounds; ++r) {
          cudaMemcpyAsync(dx.p, inputs[i].data(), in_n * 4, cudaMemcpyHostToDevice, stream);
          x.enqueue(stream);  // eager at first, then a replayed graph
          cudaMemcpyAsync(y.data(), dy.p, y_n * 4, cudaMemcpyDeviceToHost, stream);
          cudaMemcpyAsync(s.data(), ds.p, s_n * 4, cudaMemcpyDeviceToHost, stream);
          if (cudaStreamSynchronize(stream) != cudaSuccess) return void(++failed);
          if (y != expected_y[i] || s != expected_s[i]) {
            if (wrong++ == 0) {
              float dy = 0, ds = 0;
              for (std::size_t k = 0; k < y_n; ++k) dy = std::max(dy, std::fabs(y[k] - expected_y[i][k]));
              for (std::size_t k = 0; k < s_n; ++k) ds = std::max(ds, std::fabs(s[k] - expected_s[i][k]));
              first_wrong = "thread " + std::to_string(t) + " round " + std::to_string(r) + ": max |dy| " +
                            std::to_string(dy) + ", max |ds| " + std::to_string(ds) + ", y[0] " + std::to_string(y[0]) +
                            " want " + std::to_string(expected_y[i][0]);
            }
          }
          // Scribble over the outputs: a run that wrote nothing would otherwise pass.
          cudaMemsetAsync(dy.p, 0xff, y_n * 4, stream);
          cudaMemsetAsync(ds.p, 0xff, s_n * 4, stream);
        }
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
        auto host = e.create_execution();
        for (int r = 0; r < kRounds / 4; ++r) {
          auto out = host.run({{"x", {DataType::kFLOAT, dims, inputs[i].data()}}});
          const auto* py = reinterpret_cast<const float*>(out.at("y").data.get());
          if (std::memcmp(py, expected_y[i].data(), y_n * 4) != 0) ++wrong;
        }
      } catch (const std::exception&) {
        ++failed;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "of " << kThreads * (kRounds + kRounds / 4) << " runs; first: " << first_wrong;
}
