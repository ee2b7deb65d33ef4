// The CUDA backend end to end (label gpu: needs a CUDA device and libtensoracle_cuda.so, which
// CTest points at with TENSORACLE_CUDA_BACKEND): build, run() with host arrays, enqueue on
// device buffers and a caller's stream, CUDA-graph replay, reopening, device identity, and the
// errors for what the backend refuses.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "core/numeric.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "qdq_models.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

using namespace tensoracle;
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

// float16 or bfloat16 bits (t) of each value, rounded to nearest even.
std::vector<std::uint16_t> to_16bit(DataType t, const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = t == DataType::kHALF ? core::float_to_half(v[i]) : core::float_to_bf16(v[i]);
  return h;
}

// n integers drawn uniformly from [lo, hi], as floats (sums of their products stay exact).
std::vector<float> integers(std::size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(d(rng));
  return v;
}

// How many of the n 16-bit values differ between a and b; `first`: the lowest index that does.
std::size_t differing(const std::uint16_t* a, const std::uint16_t* b, std::size_t n, std::size_t& first) {
  std::size_t differ = 0;
  for (std::size_t i = n; i-- > 0;)
    if (a[i] != b[i]) ++differ, first = i;
  return differ;
}

// An engine of `graph`, whose one input "x" is fixed at `dims`, built for `device` at `level`.
template <class Graph>
std::vector<std::byte> fixed_engine(const Graph& graph, const Dims& dims, const char* device, int level) {
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed(dims);
  d.settings.device = device;
  d.settings.optimization_level = level;
  return build_serialized_engine(graph, d);
}

// Output "y" of the engine run on x (float16 or bfloat16 bits, t), as floats.
std::vector<float> output_y(const std::vector<std::byte>& bytes, DataType t, const Dims& dims, const std::uint16_t* x) {
  auto r = Engine::deserialize(bytes).create_execution().run({{"x", {t, dims, x}}});
  const auto* h = reinterpret_cast<const std::uint16_t*>(r.at("y").data.get());
  std::vector<float> v(static_cast<std::size_t>(r.at("y").dims.volume()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t == DataType::kHALF ? core::half_to_float(h[i]) : core::bf16_to_float(h[i]);
  return v;
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
    EXPECT_EQ(tactic.substr(0, tactic.find('/')),
              act == ActivationType::kRELU ? "cuda.gemm.cublaslt.epilogue2" : "cuda.gemm.cublaslt.epilogue1");
    EXPECT_NE(tactic.find("/algo:"), std::string::npos) << tactic;
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
  EXPECT_EQ(e.layers()[0].tactic, "cuda.gemm.cublaslt.epilogue2");
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
    const auto at = tactic.find("/ws:");
    ASSERT_NE(at, std::string::npos) << tactic;
    EXPECT_LE(std::stoull(tactic.substr(at + 4)), (std::uint64_t{1} << 20) - arena) << tactic;
    EXPECT_EQ(level >= 2, tactic.find("/algo:") != std::string::npos) << tactic;
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

TEST(Cuda, ConvolutionMatchesTheCpuBackend) {
  static std::vector<float> w = uniform(8 * 3 * 3 * 3, -0.5f, 0.5f, 21);
  static std::vector<float> bias = uniform(8, -0.5f, 0.5f, 22);
  auto conv = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2, 3, 9, 9});
    auto* c = net.add_convolution_nd(x, 8, {3, 3}, Weights(DataType::kFLOAT, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                     Weights(DataType::kFLOAT, bias.data(), 8, nullptr));
    auto* y = net.add_activation(c->get_output(0), ActivationType::kRELU)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  auto x = uniform(2 * 3 * 9 * 9, -1.f, 1.f, 23);
  std::vector<float> outs[2];
  int k = 0;
  for (const char* device : {"cpu", "cuda:0"}) {
    EngineBuild d;
    d.inputs["x"] = InputShape::fixed({2, 3, 9, 9});
    d.settings.device = device;
    auto r = Engine::deserialize(build_serialized_engine(conv, d)).create_execution().run({{"x", {DataType::kFLOAT, {2, 3, 9, 9}, x.data()}}});
    const auto& y = r.at("y");
    ASSERT_EQ(y.dims, (Dims{2, 8, 7, 7}));
    const auto* p = reinterpret_cast<const float*>(y.data.get());
    outs[k++].assign(p, p + 2 * 8 * 7 * 7);
  }
  for (std::size_t i = 0; i < outs[0].size(); ++i) EXPECT_NEAR(outs[1][i], outs[0][i], 1e-5) << i;
}

// Convolutions through cuDNN (cudnn_conv.h) agree with the CPU backend: 1-, 2- and 3-D, strides,
// dilations, asymmetric padding, groups, with and without a bias and a following activation
// (one pass after cuDNN), float32 and float16, the heuristic's configuration (level 0) and the
// timed one (level 3); a reopened engine rebuilds the same plan; a depthwise convolution keeps
// the direct kernel at level 0; a configuration this cuDNN cannot build falls back to the
// backend's own path; a malformed one is a CorruptEngineError; a tactic of an engine built
// before the bias pass (a:1: the bias written first, accumulated onto by cuDNN) still runs.
TEST(Cuda, CudnnConvolutionsMatchTheCpuBackend) {
  struct Case {
    Dims x, kernel, stride, pre, post, dilation;
    int k, groups;
    bool bias;
    std::optional<ActivationType> act;
  };
  const std::vector<Case> cases = {
      {{2, 16, 14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 32, 1, true, ActivationType::kRELU},
      {{2, 16, 14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 32, 1, true, std::nullopt},
      {{1, 8, 17, 15}, {5, 3}, {2, 2}, {1, 0}, {2, 1}, {2, 1}, 16, 1, false, ActivationType::kSIGMOID},
      {{1, 8, 17, 15}, {5, 3}, {2, 2}, {1, 0}, {2, 1}, {2, 1}, 16, 1, false, std::nullopt},
      {{2, 16, 9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 24, 4, true, ActivationType::kGELU_ERF},
      {{3, 8, 40}, {3}, {1}, {1}, {1}, {1}, 16, 1, true, std::nullopt},
      {{1, 4, 6, 7, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 8, 1, true, ActivationType::kLEAKY_RELU},
      {{2, 8, 10, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 8, 8, true, ActivationType::kRELU},  // depthwise
      {{2, 8, 12, 12}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 16, 1, true, ActivationType::kRELU},  // post 0 suffices
  };
  int seed = 100;
  for (const Case& c : cases) {
    for (DataType t : {DataType::kFLOAT, DataType::kHALF}) {
      const std::int64_t cin = c.x[1];
      std::int64_t kvol = 1;
      for (int i = 0; i < c.kernel.rank(); ++i) kvol *= c.kernel[i];
      auto wf = uniform(static_cast<std::size_t>(c.k * (cin / c.groups) * kvol), -0.3f, 0.3f, ++seed);
      auto bf = uniform(static_cast<std::size_t>(c.k), -0.5f, 0.5f, ++seed);
      auto xf = uniform(static_cast<std::size_t>(c.x.volume()), -1.f, 1.f, ++seed);
      auto narrow = [&](const std::vector<float>& v) {
        std::vector<std::uint16_t> h(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) h[i] = core::float_to_half(v[i]);
        return h;
      };
      auto wh = narrow(wf), bh = narrow(bf), xh = narrow(xf);
      const void* wp = t == DataType::kFLOAT ? static_cast<const void*>(wf.data()) : wh.data();
      const void* bp = t == DataType::kFLOAT ? static_cast<const void*>(bf.data()) : bh.data();
      const void* xp = t == DataType::kFLOAT ? static_cast<const void*>(xf.data()) : xh.data();
      auto graph = [&](Network& net) {
        auto* x = net.add_input("x", t, c.x);
        auto* l = net.add_convolution_nd(x, c.k, c.kernel, Weights(t, wp, static_cast<std::int64_t>(wf.size()), nullptr),
                                         c.bias ? Weights(t, bp, c.k, nullptr) : Weights());
        ConvolutionParams p = l->get();
        p.stride = c.stride;
        p.pre_padding = c.pre;
        p.post_padding = c.post;
        p.dilation = c.dilation;
        p.num_groups = c.groups;
        l->set(p);
        auto* y = l->get_output(0);
        if (c.act) {
          auto* a = net.add_activation(y, *c.act);
          if (*c.act == ActivationType::kLEAKY_RELU) a->set_alpha(0.1f);
          y = a->get_output(0);
        }
        y->set_name("y");
        net.mark_output(y);
      };
      auto floats = [&](const auto& tensor) {  // an output as float32 values
        std::vector<float> v(static_cast<std::size_t>(tensor.dims.volume()));
        for (std::size_t i = 0; i < v.size(); ++i)
          v[i] = t == DataType::kFLOAT ? reinterpret_cast<const float*>(tensor.data.get())[i]
                                       : core::half_to_float(reinterpret_cast<const std::uint16_t*>(tensor.data.get())[i]);
        return v;
      };
      std::vector<float> ref;
      const std::string what = "x " + c.x.str() + " kernel " + c.kernel.str() + " groups " + std::to_string(c.groups) +
                               (c.bias ? " bias" : "") + (c.act ? " activation " + std::to_string(static_cast<int>(*c.act)) : "") +
                               (t == DataType::kHALF ? " float16" : " float32");
      for (int level : {-1, 0, 3}) {  // -1: the CPU reference
        EngineBuild d;
        d.inputs["x"] = InputShape::fixed(c.x);
        d.settings.device = level < 0 ? "cpu" : "cuda:0";
        if (level >= 0) d.settings.optimization_level = level;
        const auto bytes = build_serialized_engine(graph, d);
        Engine e = Engine::deserialize(bytes);
        if (level >= 0 && nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0)
          GTEST_SKIP() << "cuDNN is not available on this machine";
        const std::string tactic = e.layers()[0].tactic;
        if (level == 0) {  // cuDNN's first choice, except depthwise: the direct kernel
          EXPECT_EQ(tactic.rfind(c.groups == cin ? "cuda.convolution" : "cuda.convolution.cudnn/", 0), 0u)
              << what << ": " << tactic;
          if (c.groups == cin) {
            EXPECT_EQ(tactic, "cuda.convolution") << what;
          }
        }
        auto r = e.create_execution().run({{"x", {t, c.x, xp}}});
        const auto& y = r.at("y");
        const std::vector<float> got = floats(y);
        if (level < 0) {
          ref = got;
          continue;
        }
        ASSERT_EQ(got.size(), ref.size()) << what;
        const double tol = t == DataType::kFLOAT ? 2e-5 : 4e-3;  // float32 sums in another order; 1-2 float16 ulp
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " level " << level << " at " << i
                                                                      << " (" << tactic << ")";
        // Reopened: the same plan, bit for bit the same results.
        auto again = Engine::deserialize(bytes).create_execution().run({{"x", {t, c.x, xp}}});
        EXPECT_EQ(std::memcmp(again.at("y").data.get(), y.data.get(), got.size() * element_size(t)), 0) << what;
        if (level != 0 || !tactic.starts_with("cuda.convolution.cudnn/")) continue;
        // An engine index cuDNN does not have: the backend's own convolution, same values.
        plan::Plan pl = plan::read_engine(bytes, "test", nullptr);
        std::size_t ci = 0;
        while (ci < pl.graph.nodes.size() && pl.graph.nodes[ci].tactic != tactic) ++ci;
        ASSERT_LT(ci, pl.graph.nodes.size()) << what;
        pl.graph.nodes[ci].tactic = tactic.substr(0, tactic.find("/cfg:")) + "/cfg:999999/ws:0";
        auto fallback = Engine::deserialize(plan::write_engine(pl)).create_execution().run({{"x", {t, c.x, xp}}});
        const std::vector<float> fb = floats(fallback.at("y"));
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(fb[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " (fallback) at " << i;
        // An engine built before the bias pass: the bias written into y first, cuDNN accumulating.
        if (c.bias) {
          ASSERT_NE(tactic.find("/a:0/"), std::string::npos) << tactic;
          pl.graph.nodes[ci].tactic = tactic.substr(0, tactic.find("/a:0/")) + "/a:1/" + tactic.substr(tactic.find("/a:0/") + 5);
          auto old = Engine::deserialize(plan::write_engine(pl)).create_execution().run({{"x", {t, c.x, xp}}});
          const std::vector<float> ov = floats(old.at("y"));
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(ov[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " (a:1 tactic) at " << i;
        }
        // Padding after described as symmetric (the least the last window needs is 0 here); an
        // engine that stored the least describes the same problem and runs the same plan.
        if (const auto q = tactic.find("/s:2x2/d:1x1/p:1x1/q:1x1/"); q != std::string::npos) {
          pl.graph.nodes[ci].tactic = tactic.substr(0, q) + "/s:2x2/d:1x1/p:1x1/q:0x0/" + tactic.substr(q + 25);
          auto least = Engine::deserialize(plan::write_engine(pl)).create_execution().run({{"x", {t, c.x, xp}}});
          const std::vector<float> lv = floats(least.at("y"));
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(lv[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " (q:0x0 tactic) at " << i;
        } else if (c.stride == Dims{2, 2} && c.kernel == Dims{3, 3}) {
          ADD_FAILURE() << what << ": expected symmetric padding in " << tactic;
        }
        for (const std::string& bad : {std::string("cuda.convolution.cudnn/x:1/cfg:0/ws:0"),
                                      tactic.substr(0, tactic.find("/ws:"))}) {
          pl.graph.nodes[ci].tactic = bad;
          EXPECT_THROW(Engine::deserialize(plan::write_engine(pl)), CorruptEngineError) << what << ": " << bad;
        }
      }
    }
  }
}

// Few outputs over many elements (a full reduction, a reduced axis of columns, rows of rows)
// are split over blocks (tactic cuda.reduce.split: partials in the workspace, combined in a
// fixed order) and agree with the CPU in every type and operation: integers and MAX/MIN
// exactly, float sums (double on both sides, grouped differently) to the output type's last
// bit. Many outputs keep cuda.reduce; so does a workspace limit below the partials' scratch;
// an engine from before the split (cuda.reduce) runs unsplit with the same results; another
// tactic is a CorruptEngineError.
TEST(Cuda, ReductionsOfFewOutputsSplitOverBlocksMatchTheCpuBackend) {
  struct Case {
    Dims x;
    std::uint32_t axes;
    bool split;
  };
  const std::vector<Case> cases = {
      {{1 << 22}, 1u, true},                // one row of 4 M elements
      {{3, 1 << 20}, 2u, true},             // three long rows
      {{1 << 16, 64}, 1u, true},            // the first axis of 64 columns (column teams)
      {{512, 8, 1024}, 5u, true},           // 8 outputs over 512 rows of 1024
      {{1 << 16, 8, 16}, 5u, true},         // 8 outputs over rows of 16 (flat positions)
      {{4096, 256}, 2u, false},             // 4096 outputs of 256: one team each, as before
  };
  struct Op {
    DataType type;
    ReduceOperation op;
  };
  const std::vector<Op> ops = {{DataType::kFLOAT, ReduceOperation::kSUM},  {DataType::kFLOAT, ReduceOperation::kAVG},
                               {DataType::kFLOAT, ReduceOperation::kMAX},  {DataType::kFLOAT, ReduceOperation::kPROD},
                               {DataType::kHALF, ReduceOperation::kSUM},   {DataType::kHALF, ReduceOperation::kMIN},
                               {DataType::kBF16, ReduceOperation::kAVG},   {DataType::kINT32, ReduceOperation::kSUM},
                               {DataType::kINT32, ReduceOperation::kMAX},  {DataType::kINT64, ReduceOperation::kSUM}};
  unsigned seed = 900;
  for (const auto& c : cases) {
    for (const auto& o : ops) {
      const std::string what = c.x.str() + " axes " + std::to_string(c.axes) + " " + std::string(type_name(o.type)) + " op " +
                               std::to_string(static_cast<int>(o.op));
      SCOPED_TRACE(what);
      const auto n = static_cast<std::size_t>(c.x.volume());
      // values: floats of both signs (PROD: factors near 1), integers that overflow int32 sums
      const auto f = o.op == ReduceOperation::kPROD ? uniform(n, 0.99999f, 1.00001f, ++seed) : uniform(n, -2.f, 2.f, ++seed);
      std::vector<std::byte> data(n * element_size(o.type));
      for (std::size_t i = 0; i < n; ++i) {
        switch (o.type) {
          case DataType::kFLOAT: std::memcpy(&data[i * 4], &f[i], 4); break;
          case DataType::kHALF: {
            const std::uint16_t h = core::float_to_half(f[i]);
            std::memcpy(&data[i * 2], &h, 2);
            break;
          }
          case DataType::kBF16: {
            const std::uint16_t h = core::float_to_bf16(f[i]);
            std::memcpy(&data[i * 2], &h, 2);
            break;
          }
          case DataType::kINT32: {
            const auto v = static_cast<std::int32_t>(f[i] * 5e8f);
            std::memcpy(&data[i * 4], &v, 4);
            break;
          }
          default: {
            const auto v = static_cast<std::int64_t>(f[i] * 4e18f);
            std::memcpy(&data[i * 8], &v, 8);
          }
        }
      }
      auto graph = [&](Network& net) {
        auto* x = net.add_input("x", o.type, c.x);
        auto* y = net.add_reduce(x, o.op, c.axes, false)->get_output(0);
        y->set_name("y");
        net.mark_output(y);
      };
      auto build = [&](const char* device, std::uint64_t limit) {
        EngineBuild d;
        d.inputs["x"] = InputShape::fixed(c.x);
        d.settings.device = device;
        d.settings.optimization_level = 0;
        d.settings.workspace_limit = limit;
        return build_serialized_engine(graph, d);
      };
      auto run = [&](const std::vector<std::byte>& bytes) {
        return Engine::deserialize(bytes).create_execution().run({{"x", {o.type, c.x, data.data()}}}).at("y");
      };
      const HostTensor ref = run(build("cpu", 0));
      auto expect_same = [&](const HostTensor& got, const std::string& how) {
        ASSERT_EQ(got.nbytes, ref.nbytes) << how;
        const std::size_t m = ref.nbytes / element_size(o.type);
        for (std::size_t i = 0; i < m; ++i) {
          if (o.type == DataType::kFLOAT) {
            float a, b;
            std::memcpy(&a, &got.data[i * 4], 4);
            std::memcpy(&b, &ref.data[i * 4], 4);
            if (o.op == ReduceOperation::kMAX) ASSERT_EQ(a, b) << how << " at " << i;
            else ASSERT_NEAR(a, b, 2e-7 * (1 + std::fabs(b))) << how << " at " << i;
          } else if (o.type == DataType::kHALF || o.type == DataType::kBF16) {
            std::uint16_t a, b;
            std::memcpy(&a, &got.data[i * 2], 2);
            std::memcpy(&b, &ref.data[i * 2], 2);
            if (o.op == ReduceOperation::kMIN) ASSERT_EQ(a, b) << how << " at " << i;
            else ASSERT_LE(std::abs(int(a) - int(b)), 1) << how << " at " << i << ": bits " << a << " vs " << b;
          } else {
            ASSERT_EQ(std::memcmp(&got.data[i * element_size(o.type)], &ref.data[i * element_size(o.type)],
                                  element_size(o.type)), 0) << how << " at " << i;
          }
        }
      };
      const auto bytes = build("cuda:0", 0);
      Engine e = Engine::deserialize(bytes);
      EXPECT_EQ(e.layers()[0].tactic, c.split ? "cuda.reduce.split" : "cuda.reduce");
      const HostTensor got = run(bytes);
      expect_same(got, "built");
      if (!c.split) continue;
      // Reopened: the same results, bit for bit.
      const HostTensor again = run(bytes);
      EXPECT_EQ(std::memcmp(again.data.get(), got.data.get(), got.nbytes), 0);
      // No room for the partials: one team per output.
      const auto limited = build("cuda:0", 64 << 10);
      EXPECT_EQ(Engine::deserialize(limited).layers()[0].tactic, "cuda.reduce");
      expect_same(run(limited), "within a 64 KiB workspace limit");
      if (o.type != DataType::kFLOAT || o.op != ReduceOperation::kSUM) continue;
      plan::Plan pl = plan::read_engine(bytes, "test", nullptr);
      ASSERT_EQ(pl.graph.nodes.size(), 1u);
      pl.graph.nodes[0].tactic = "cuda.reduce";  // an engine from before the split
      expect_same(run(plan::write_engine(pl)), "unsplit tactic");
      pl.graph.nodes[0].tactic = "cuda.reduce.splits";
      EXPECT_THROW(Engine::deserialize(plan::write_engine(pl)), CorruptEngineError);
    }
  }
}

// A cuDNN plan is built for the profile's opt shapes; other batch sizes of a ranged profile run
// the backend's own path, in the workspace reserved for the profile's max, and agree with the CPU.
TEST(Cuda, CudnnConvolutionAtOtherShapesTakesTheOwnPath) {
  static std::vector<float> w = uniform(16 * 8 * 3 * 3, -0.3f, 0.3f, 31);
  static std::vector<float> bias = uniform(16, -0.5f, 0.5f, 32);
  auto graph = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {-1, 8, 11, 11});
    auto* l = net.add_convolution_nd(x, 16, {3, 3}, Weights(DataType::kFLOAT, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                     Weights(DataType::kFLOAT, bias.data(), 16, nullptr));
    ConvolutionParams p = l->get();
    p.pre_padding = p.post_padding = {1, 1};
    l->set(p);
    l->get_output(0)->set_name("y");
    net.mark_output(l->get_output(0));
  };
  std::vector<Engine> engines;
  for (const char* device : {"cpu", "cuda:0"}) {
    EngineBuild d;
    d.inputs["x"] = InputShape::ranged({1, 8, 11, 11}, {2, 8, 11, 11}, {5, 8, 11, 11});
    d.settings.device = device;
    d.settings.optimization_level = 0;
    engines.push_back(Engine::deserialize(build_serialized_engine(graph, d)));
  }
  if (nlohmann::json::parse(engines[1].target_json()).value("cudnn", 0) == 0)
    GTEST_SKIP() << "cuDNN is not available on this machine";
  EXPECT_TRUE(engines[1].layers()[0].tactic.starts_with("cuda.convolution.cudnn/t:0/x:2x8x11x11/"))
      << engines[1].layers()[0].tactic;
  auto cpu = engines[0].create_execution();
  auto gpu = engines[1].create_execution();
  for (std::int64_t n : {2, 1, 5, 2}) {
    auto x = uniform(static_cast<std::size_t>(n * 8 * 11 * 11), -1.f, 1.f, 40 + static_cast<int>(n));
    const std::map<std::string, HostTensorView> in = {{"x", {DataType::kFLOAT, {n, 8, 11, 11}, x.data()}}};
    auto a = cpu.run(in), b = gpu.run(in);
    ASSERT_EQ(b.at("y").dims, (Dims{n, 16, 11, 11}));
    const auto* pa = reinterpret_cast<const float*>(a.at("y").data.get());
    const auto* pb = reinterpret_cast<const float*>(b.at("y").data.get());
    for (std::int64_t i = 0; i < n * 16 * 11 * 11; ++i) ASSERT_NEAR(pb[i], pa[i], 2e-5 * (1 + std::fabs(pa[i]))) << n << " " << i;
  }
}

// Channels-last cuDNN plans (tactic field l:, cudnn_tactic.h): x and the kernel transposed into
// the workspace with their channels padded (3 -> 4, 12 -> 16, 64 stays), y transposed back with
// the bias and the activation. TENSORACLE_CUDNN_LAYOUT=nhwc makes the builder take them at any
// level (the timing alone picks them where they win); "nchw" keeps them out of the timing.
// float16 and bfloat16 agree with the CPU backend; reopened engines rebuild the same plan.
TEST(Cuda, ChannelsLastCudnnConvolutionsMatchTheCpuBackend) {
  struct Case {
    Dims x, kernel, stride, pad;
    int k;
    bool bias;
    std::optional<ActivationType> act;
    int padded;  // the channel count of the copies
  };
  const std::vector<Case> cases = {
      {{2, 3, 30, 30}, {7, 7}, {2, 2}, {3, 3}, 16, true, ActivationType::kRELU, 4},  // a ResNet stem
      {{2, 64, 9, 9}, {3, 3}, {1, 1}, {1, 1}, 32, true, std::nullopt, 64},
      {{1, 12, 10, 11}, {3, 3}, {1, 2}, {0, 1}, 8, false, ActivationType::kGELU_ERF, 16},
      {{3, 8, 40}, {3}, {1}, {1}, 16, true, ActivationType::kSIGMOID, 8},  // 1-D: 2-D with a leading 1
  };
  struct Env {  // TENSORACLE_CUDNN_LAYOUT for this test only
    explicit Env(const char* v) { setenv("TENSORACLE_CUDNN_LAYOUT", v, 1); }
    ~Env() { unsetenv("TENSORACLE_CUDNN_LAYOUT"); }
  };
  int seed = 300;
  for (const Case& c : cases) {
    for (DataType t : {DataType::kHALF, DataType::kBF16}) {
      std::int64_t kvol = 1;
      for (int i = 0; i < c.kernel.rank(); ++i) kvol *= c.kernel[i];
      auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
      const auto w = narrow(uniform(static_cast<std::size_t>(c.k * c.x[1] * kvol), -0.3f, 0.3f, ++seed));
      const auto b = narrow(uniform(static_cast<std::size_t>(c.k), -0.5f, 0.5f, ++seed));
      const auto x = narrow(uniform(static_cast<std::size_t>(c.x.volume()), -1.f, 1.f, ++seed));
      auto graph = [&](Network& net) {
        auto* in = net.add_input("x", t, c.x);
        auto* l = net.add_convolution_nd(in, c.k, c.kernel, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                         c.bias ? Weights(t, b.data(), c.k, nullptr) : Weights());
        ConvolutionParams p = l->get();
        p.stride = c.stride;
        p.pre_padding = p.post_padding = c.pad;
        l->set(p);
        auto* y = l->get_output(0);
        if (c.act) y = net.add_activation(y, *c.act)->get_output(0);
        y->set_name("y");
        net.mark_output(y);
      };
      const std::string what = "x " + c.x.str() + " kernel " + c.kernel.str() + (t == DataType::kHALF ? " float16" : " bfloat16");
      auto build = [&](const char* device, int level) { return fixed_engine(graph, c.x, device, level); };
      auto values = [&](const std::vector<std::byte>& bytes) { return output_y(bytes, t, c.x, x.data()); };
      const std::vector<float> ref = values(build("cpu", 0));
      const std::string field = "/l:" + std::to_string(c.padded) + "/";
      for (int level : {0, 3}) {
        std::vector<std::byte> bytes;
        {
          Env env("nhwc");
          bytes = build("cuda:0", level);
        }
        Engine e = Engine::deserialize(bytes);
        if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
        const std::string tactic = e.layers()[0].tactic;
        ASSERT_NE(tactic.find(field), std::string::npos) << what << " level " << level << ": " << tactic;
        const std::vector<float> got = values(bytes);
        ASSERT_EQ(got.size(), ref.size()) << what;
        // The result rounded to the type before the bias (as every cuDNN plan): 1-2 ulp.
        const double tol = t == DataType::kHALF ? 4e-3 : 2.5e-2;
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " level " << level << " at " << i << " (" << tactic << ")";
        EXPECT_EQ(values(bytes), got) << what << ": reopened";
      }
      Env env("nchw");
      const std::string tactic = Engine::deserialize(build("cuda:0", 3)).layers()[0].tactic;
      EXPECT_EQ(tactic.find("/l:"), std::string::npos) << what << ": " << tactic;
    }
  }
}

// A residual block's add and the ReLU after it, fused into the convolution's node, run as one
// pass (sum_relu): the residual as the add's second or first operand, or a broadcast one
// ([1, C, 1, 1]), in float32, float16 and bfloat16, equal to the CPU backend's values.
TEST(Cuda, ResidualAddAndReluInOnePassMatchTheCpuBackend) {
  const Dims xd{2, 16, 10, 10};
  int seed = 400;
  for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16}) {
    for (int variant = 0; variant < 3; ++variant) {
      auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
      const auto wf = uniform(16 * 16 * 9, -0.2f, 0.2f, ++seed), bf = uniform(16, -0.5f, 0.5f, ++seed);
      const auto xf = uniform(static_cast<std::size_t>(xd.volume()), -1.f, 1.f, ++seed), rf = uniform(16, -1.f, 1.f, ++seed);
      const auto wh = narrow(wf), bh = narrow(bf), xh = narrow(xf), rh = narrow(rf);
      auto data = [&](const std::vector<float>& f, const std::vector<std::uint16_t>& h) {
        return t == DataType::kFLOAT ? static_cast<const void*>(f.data()) : static_cast<const void*>(h.data());
      };
      auto graph = [&](Network& net) {
        auto* x = net.add_input("x", t, xd);
        auto* c = net.add_convolution_nd(x, 16, {3, 3}, Weights(t, data(wf, wh), 16 * 16 * 9, nullptr), Weights(t, data(bf, bh), 16, nullptr));
        ConvolutionParams p = c->get();
        p.pre_padding = p.post_padding = {1, 1};
        c->set(p);
        Tensor* residual = x;
        if (variant == 2) residual = net.add_constant({1, 16, 1, 1}, Weights(t, data(rf, rh), 16, nullptr))->get_output(0);
        auto* sum = variant == 1 ? net.add_elementwise(residual, c->get_output(0), ElementWiseOperation::kSUM)
                                 : net.add_elementwise(c->get_output(0), residual, ElementWiseOperation::kSUM);
        auto* y = net.add_activation(sum->get_output(0), ActivationType::kRELU)->get_output(0);
        y->set_name("y");
        net.mark_output(y);
      };
      const std::string what = "variant " + std::to_string(variant) + " type " + std::to_string(static_cast<int>(t));
      std::vector<float> outs[2];
      for (int k = 0; k < 2; ++k) {
        EngineBuild d;
        d.inputs["x"] = InputShape::fixed(xd);
        d.settings.device = k == 0 ? "cpu" : "cuda:0";
        Engine e = Engine::deserialize(build_serialized_engine(graph, d));
        if (k == 1) {
          const auto layers = e.layers();
          ASSERT_EQ(layers.size(), 1u) << what;
          EXPECT_EQ(layers[0].fused.size(), 2u) << what;  // the add and the ReLU
        }
        auto r = e.create_execution().run({{"x", {t, xd, data(xf, xh)}}});
        const auto& y = r.at("y");
        outs[k].resize(static_cast<std::size_t>(y.dims.volume()));
        for (std::size_t i = 0; i < outs[k].size(); ++i) {
          const auto* h = reinterpret_cast<const std::uint16_t*>(y.data.get());
          outs[k][i] = t == DataType::kFLOAT  ? reinterpret_cast<const float*>(y.data.get())[i]
                       : t == DataType::kHALF ? core::half_to_float(h[i])
                                              : core::bf16_to_float(h[i]);
        }
      }
      const double tol = t == DataType::kFLOAT ? 2e-5 : t == DataType::kHALF ? 4e-3 : 2.5e-2;
      std::size_t zeros = 0;
      for (std::size_t i = 0; i < outs[0].size(); ++i) {
        ASSERT_NEAR(outs[1][i], outs[0][i], tol * (1 + std::fabs(outs[0][i]))) << what << " at " << i;
        zeros += outs[0][i] == 0.f;
      }
      EXPECT_GT(zeros, outs[0].size() / 10) << what;  // the ReLU clipped something
      EXPECT_LT(zeros, outs[0].size() * 9 / 10) << what;
    }
  }
}

// Channels-last values between convolutions (CudnnTactic::out_channels_last): a residual
// network whose convolutions read and write channels-last values (as data, and as the residual
// operand of a fused add), starting from an NCHW input used as a residual and ending in a
// network output read back as NCHW, in float16 and bfloat16, against the CPU backend; the same
// engine with every cuDNN plan replaced by the backend's own path (packed copies around it);
// TENSORACLE_CUDNN_LAYOUT=nchw keeps every value packed; a tactic that stores a network output
// channels-last is a CorruptEngineError.
TEST(Cuda, ChannelsLastValuesBetweenConvolutionsMatchTheCpuBackend) {
  const Dims xd{2, 16, 12, 12};
  struct Env {
    explicit Env(const char* v) { setenv("TENSORACLE_CUDNN_LAYOUT", v, 1); }
    ~Env() { unsetenv("TENSORACLE_CUDNN_LAYOUT"); }
  };
  int seed = 500;
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    std::vector<std::vector<std::uint16_t>> weights;  // kept alive while building
    auto conv = [&](Network& net, Tensor* in, int cin, int k, int size, int stride, bool bias) {
      weights.push_back(narrow(uniform(static_cast<std::size_t>(k * cin * size * size), -0.25f, 0.25f, ++seed)));
      const auto& w = weights.back();
      Weights b;
      if (bias) {
        weights.push_back(narrow(uniform(static_cast<std::size_t>(k), -0.3f, 0.3f, ++seed)));
        b = Weights(t, weights.back().data(), k, nullptr);
      }
      auto* l = net.add_convolution_nd(in, k, {size, size}, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr), b);
      ConvolutionParams p = l->get();
      p.stride = {stride, stride};
      p.pre_padding = p.post_padding = {size / 2, size / 2};
      l->set(p);
      return l->get_output(0);
    };
    auto relu = [](Network& net, Tensor* v) { return net.add_activation(v, ActivationType::kRELU)->get_output(0); };
    auto add = [](Network& net, Tensor* a, Tensor* b) { return net.add_elementwise(a, b, ElementWiseOperation::kSUM)->get_output(0); };
    auto graph = [&](Network& net) {
      weights.clear();
      weights.reserve(16);  // no reallocation: the network keeps pointers into these
      seed = 500;
      auto* x = net.add_input("x", t, xd);
      auto* a = relu(net, conv(net, x, 16, 16, 3, 1, true));                      // reads x packed
      auto* r1 = relu(net, add(net, conv(net, a, 16, 16, 3, 1, true), x));      // x: a packed residual
      auto* c = relu(net, conv(net, r1, 16, 32, 3, 2, true));                   // stride 2
      auto* d = conv(net, r1, 16, 32, 1, 2, false);                             // 1x1 shortcut
      auto* r2 = relu(net, add(net, d, conv(net, c, 32, 32, 3, 1, true)));      // residual first
      auto* y = add(net, conv(net, r2, 32, 32, 3, 1, false), r2);               // read back as NCHW
      y->set_name("y");
      net.mark_output(y);
    };
    auto x = narrow(uniform(static_cast<std::size_t>(xd.volume()), -1.f, 1.f, 501));
    auto build = [&](const char* device, int level) { return fixed_engine(graph, xd, device, level); };
    auto values = [&](const std::vector<std::byte>& bytes) { return output_y(bytes, t, xd, x.data()); };
    const std::string what = t == DataType::kHALF ? "float16" : "bfloat16";
    const std::vector<float> ref = values(build("cpu", 0));
    // Six layers of products, each result rounded to the type, the last one a sum that cancels:
    // a few ulp of the inputs' magnitude (bfloat16's ulp is 8 times float16's). A wrong layout
    // would put most elements off by about their own size: the mean error is also bounded.
    const double tol = t == DataType::kHALF ? 1e-2 : 8e-2;
    auto expect_close = [&](const std::vector<float>& got, const std::string& how) {
      ASSERT_EQ(got.size(), ref.size()) << what << " " << how;
      double err = 0, mag = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " " << how << " at " << i;
        err += std::fabs(got[i] - ref[i]);
        mag += std::fabs(ref[i]);
      }
      EXPECT_LT(err, 0.1 * mag) << what << " " << how;
    };
    for (int level : {0, 3}) {
      std::vector<std::byte> bytes;
      if (level == 0) {
        Env env("nhwc");  // level 0 takes channels-last plans only when told to
        bytes = build("cuda:0", 0);
      } else {
        bytes = build("cuda:0", 3);
      }
      Engine e = Engine::deserialize(bytes);
      if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
      const auto layers = e.layers();
      ASSERT_EQ(layers.size(), 6u) << what;
      std::string tactics;
      int chained = 0;
      for (const auto& l : layers) {
        tactics += l.tactic + "\n";
        chained += l.tactic.find("/o:1/") != std::string::npos;
      }
      // Every convolution but the last (a network output) writes channels-last.
      EXPECT_EQ(chained, 5) << what << " level " << level << ":\n" << tactics;
      EXPECT_EQ(layers[5].tactic.find("/o:1/"), std::string::npos) << what;
      const std::vector<float> got = values(bytes);
      expect_close(got, "level " + std::to_string(level));
      EXPECT_EQ(values(bytes), got) << what << ": reopened";
      if (level != 3) continue;
      // Every cuDNN plan replaced by the backend's own path: same layouts, packed copies around it.
      plan::Plan pl = plan::read_engine(bytes, "test", nullptr);
      for (auto& n : pl.graph.nodes)
        if (n.tactic.starts_with("cuda.convolution.cudnn/"))
          n.tactic = n.tactic.substr(0, n.tactic.find("/cfg:")) + "/cfg:999999/ws:0";
      expect_close(values(plan::write_engine(pl)), "own path");
      // A network output stored channels-last (the first node's tactic, which stores its output
      // so, on the last node): malformed.
      plan::Plan bad = plan::read_engine(bytes, "test", nullptr);
      auto& last = bad.graph.nodes.back();
      last.tactic = bad.graph.nodes.front().tactic;
      ASSERT_NE(last.tactic.find("/o:1/"), std::string::npos) << last.tactic;
      EXPECT_THROW(Engine::deserialize(plan::write_engine(bad)), CorruptEngineError) << what << ": " << last.tactic;
    }
    Env env("nchw");
    const auto bytes = build("cuda:0", 3);
    for (const auto& l : Engine::deserialize(bytes).layers()) EXPECT_EQ(l.tactic.find("/o:1"), std::string::npos) << l.tactic;
    expect_close(values(bytes), "nchw");
  }
}

// Poolings reading a convolution's channels-last output (every window path: max, average with
// and without the padding counted, blend, a window over the whole image; 2-D and 1-D; a packed
// output and, read by a convolution, a channels-last one) give the CPU's values bit for bit.
// The convolutions' values are small integers, exact in float16 and bfloat16 on both backends,
// so any difference is the pooling's.
TEST(Cuda, PoolingsOfChannelsLastValuesMatchTheCpuBackendExactly) {
  struct Pool {
    PoolingType type;
    Dims window, stride, pre, post;
    bool exclude;
    float blend;
    const char* name;
  };
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    for (int rank : {2, 1}) {
      const Dims xd = rank == 2 ? Dims{2, 16, 13, 11} : Dims{2, 16, 29};
      const Dims window = rank == 2 ? Dims{3, 3} : Dims{3}, pad = rank == 2 ? Dims{1, 1} : Dims{1};
      // Data in [-1, 1], kernel in {-1, 0, 1}, bias in [-4, 4]: every value an integer below 160.
      const auto x = narrow(integers(static_cast<std::size_t>(xd.volume()), -1, 1, 601));
      const auto w = narrow(integers(static_cast<std::size_t>(16 * 16 * (rank == 2 ? 9 : 3)), -1, 1, 602));
      const auto bias = narrow(integers(16, -4, 4, 603));
      std::vector<float> eye(16 * 16, 0.f);
      for (int k = 0; k < 16; ++k) eye[static_cast<std::size_t>(k * 16 + k)] = 1.f;
      const auto identity = narrow(eye);
      const std::vector<Pool> pools =
          rank == 2 ? std::vector<Pool>{{PoolingType::kMAX, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, 0.f, "max"},
                                        {PoolingType::kAVERAGE, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, 0.f, "average"},
                                        {PoolingType::kAVERAGE, {2, 2}, {2, 2}, {1, 0}, {1, 1}, false, 0.f, "average_padded"},
                                        {PoolingType::kMAX_AVERAGE_BLEND, {3, 2}, {1, 2}, {0, 1}, {0, 1}, true, 0.25f, "blend"},
                                        {PoolingType::kAVERAGE, {13, 11}, {1, 1}, {0, 0}, {0, 0}, true, 0.f, "global"}}
                    : std::vector<Pool>{{PoolingType::kMAX, {3}, {2}, {1}, {1}, true, 0.f, "max"},
                                        {PoolingType::kAVERAGE, {4}, {3}, {2}, {2}, false, 0.f, "average_padded"},
                                        {PoolingType::kMAX_AVERAGE_BLEND, {5}, {2}, {0}, {0}, true, 0.5f, "blend"}};
      auto graph = [&](Network& net) {
        auto* in = net.add_input("x", t, xd);
        auto* c = net.add_convolution_nd(in, 16, window, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                         Weights(t, bias.data(), 16, nullptr));
        ConvolutionParams cp = c->get();
        cp.pre_padding = cp.post_padding = pad;
        c->set(cp);
        auto add_pool = [&](const Pool& pool, const char* name) {
          auto* l = net.add_pooling_nd(c->get_output(0), pool.type, pool.window);
          PoolingParams q = l->get();
          q.stride = pool.stride;
          q.pre_padding = pool.pre;
          q.post_padding = pool.post;
          q.average_count_excludes_padding = pool.exclude;
          q.blend_factor = pool.blend;
          l->set(q);
          l->set_name(name);
          return l->get_output(0);
        };
        for (const auto& pool : pools) {
          auto* y = add_pool(pool, pool.name);
          y->set_name(pool.name);
          net.mark_output(y);
        }
        // The first pooling again, read by an identity 1 x 1 convolution: it stores its output
        // channels-last, which the convolution reads in place (exact: one tap of weight 1).
        auto* chained = add_pool(pools.front(), "chained_pool");
        auto* id = net.add_convolution_nd(chained, 16, rank == 2 ? Dims{1, 1} : Dims{1},
                                          Weights(t, identity.data(), static_cast<std::int64_t>(identity.size()), nullptr),
                                          Weights{});
        id->get_output(0)->set_name("chained");
        net.mark_output(id->get_output(0));
      };
      auto build = [&](const char* device) { return fixed_engine(graph, xd, device, 3); };
      auto run = [&](const std::vector<std::byte>& bytes) { return Engine::deserialize(bytes).create_execution().run({{"x", {t, xd, x.data()}}}); };
      const std::string what = std::string(t == DataType::kHALF ? "float16" : "bfloat16") + " rank " + std::to_string(rank);
      const auto bytes = build("cuda:0");
      Engine e = Engine::deserialize(bytes);
      if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
      const auto layers = e.layers();
      ASSERT_EQ(layers.size(), pools.size() + 3) << what;
      EXPECT_NE(layers[0].tactic.find("/o:1/"), std::string::npos) << what << ": " << layers[0].tactic;
      for (const auto& l : layers) {
        if (l.type != "pooling") continue;  // the network's outputs packed, the chained one not
        EXPECT_EQ(l.tactic, l.name == "chained_pool" ? "cuda.pooling/o:1" : "cuda.pooling") << what << " " << l.name;
      }
      const auto ref = run(build("cpu"));
      const auto got = run(bytes);
      std::vector<std::string> names{"chained"};
      for (const auto& pool : pools) names.push_back(pool.name);
      for (const auto& name : names) {
        const auto& a = ref.at(name);
        const auto& b = got.at(name);
        ASSERT_EQ(a.dims, b.dims) << what << " " << name;
        const auto* pa = reinterpret_cast<const std::uint16_t*>(a.data.get());
        const auto* pb = reinterpret_cast<const std::uint16_t*>(b.data.get());
        std::size_t first = 0;
        const std::size_t differ = differing(pa, pb, static_cast<std::size_t>(a.dims.volume()), first);
        EXPECT_EQ(differ, 0u) << what << " " << name << ": first at " << first << " (cpu " << pa[first] << ", cuda "
                              << pb[first] << ")";
      }
    }
  }
}

// A max-pool between channels-last convolutions (ResNet's stem, max-pool and first block) keeps
// the layout: the stem, the pool and the block's convolutions store their outputs channels-last,
// the pool's output read in place as data and as the block's residual; the average pool at the
// end reads a channels-last value into a packed output. The loader refuses a pooling tactic that
// stores a network output channels-last or that it does not know.
TEST(Cuda, AMaxPoolBetweenChannelsLastConvolutionsMatchesTheCpuBackend) {
  const Dims xd{2, 8, 20, 20};
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    std::vector<std::vector<std::uint16_t>> weights;
    int seed = 700;
    auto conv = [&](Network& net, Tensor* in, int cin, int k, int size, int stride) {
      weights.push_back(narrow(uniform(static_cast<std::size_t>(k * cin * size * size), -0.25f, 0.25f, ++seed)));
      const auto& w = weights.back();
      weights.push_back(narrow(uniform(static_cast<std::size_t>(k), -0.3f, 0.3f, ++seed)));
      auto* l = net.add_convolution_nd(in, k, {size, size}, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                       Weights(t, weights.back().data(), k, nullptr));
      ConvolutionParams p = l->get();
      p.stride = {stride, stride};
      p.pre_padding = p.post_padding = {size / 2, size / 2};
      l->set(p);
      return l->get_output(0);
    };
    auto relu = [](Network& net, Tensor* v) { return net.add_activation(v, ActivationType::kRELU)->get_output(0); };
    auto graph = [&](Network& net) {
      weights.clear();
      weights.reserve(16);
      seed = 700;
      auto* x = net.add_input("x", t, xd);
      auto* stem = relu(net, conv(net, x, 8, 16, 5, 2));  // 10 x 10
      auto* pl = net.add_pooling_nd(stem, PoolingType::kMAX, {3, 3});
      PoolingParams q = pl->get();
      q.stride = {2, 2};
      q.pre_padding = q.post_padding = {1, 1};
      pl->set(q);
      auto* p = pl->get_output(0);  // 5 x 5
      auto* a = relu(net, conv(net, p, 16, 16, 3, 1));
      auto* r = relu(net, net.add_elementwise(conv(net, a, 16, 16, 3, 1), p, ElementWiseOperation::kSUM)->get_output(0));
      auto* y = net.add_pooling_nd(r, PoolingType::kAVERAGE, {5, 5})->get_output(0);
      y->set_name("y");
      net.mark_output(y);
    };
    auto x = narrow(uniform(static_cast<std::size_t>(xd.volume()), -1.f, 1.f, 701));
    auto build = [&](const char* device) { return fixed_engine(graph, xd, device, 3); };
    auto values = [&](const std::vector<std::byte>& bytes) { return output_y(bytes, t, xd, x.data()); };
    const std::string what = t == DataType::kHALF ? "float16" : "bfloat16";
    const auto bytes = build("cuda:0");
    Engine e = Engine::deserialize(bytes);
    if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
    const auto layers = e.layers();
    ASSERT_EQ(layers.size(), 5u) << what;
    std::string tactics;
    for (const auto& l : layers) tactics += l.name + ": " + l.tactic + "\n";
    for (std::size_t i : {0, 2, 3}) EXPECT_NE(layers[i].tactic.find("/o:1/"), std::string::npos) << what << ":\n" << tactics;
    EXPECT_EQ(layers[1].tactic, "cuda.pooling/o:1") << what << ":\n" << tactics;
    EXPECT_EQ(layers[4].tactic, "cuda.pooling") << what << ":\n" << tactics;
    // Four layers of products rounded to the type (bfloat16's ulp is 8 times float16's); a wrong
    // layout would put most elements off by about their own size.
    const std::vector<float> ref = values(build("cpu"));
    const std::vector<float> got = values(bytes);
    ASSERT_EQ(got.size(), ref.size());
    const double tol = t == DataType::kHALF ? 1e-2 : 8e-2;
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " at " << i;
      err += std::fabs(got[i] - ref[i]);
      mag += std::fabs(ref[i]);
    }
    EXPECT_LT(err, 0.1 * mag) << what;
    EXPECT_EQ(values(bytes), got) << what << ": reopened";
    // Malformed: the average pool (a network output) stored channels-last; a tactic no pooling has.
    for (const char* bad_tactic : {"cuda.pooling/o:1", "cuda.pooling/o:2", "cuda.reduce"}) {
      plan::Plan bad = plan::read_engine(bytes, "test", nullptr);
      bad.graph.nodes.back().tactic = bad_tactic;
      EXPECT_THROW(Engine::deserialize(plan::write_engine(bad)), CorruptEngineError) << what << ": " << bad_tactic;
    }
    // Stored packed by a builder that keeps NCHW plans: the same values within the tolerance.
    setenv("TENSORACLE_CUDNN_LAYOUT", "nchw", 1);
    const auto packed = build("cuda:0");
    unsetenv("TENSORACLE_CUDNN_LAYOUT");
    for (const auto& l : Engine::deserialize(packed).layers()) EXPECT_EQ(l.tactic.find("/o:1"), std::string::npos) << l.tactic;
    const std::vector<float> nchw = values(packed);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(nchw[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " nchw at " << i;
  }
}

// The backend's direct kernel for an image's first layer (3 channels padded to 4, channels-last
// copies, tensor cores; tactic configuration "direct"), taken where TENSORACLE_CONV_DIRECT=1 says
// so: with the bias and a ReLU in the kernel, with another activation as a pass, without bias,
// writing channels-last for a max-pool, with 128 output channels (two blocks of 64), output rows
// longer than one 128-position segment and strides of 2 and (1, 2). Integer data keeps every sum
// exact on both backends, so the results equal the CPU's bit for bit.
TEST(Cuda, TheDirectFirstLayerKernelMatchesTheCpuBackendExactly) {
  struct Env {
    Env() { setenv("TENSORACLE_CONV_DIRECT", "1", 1); }
    ~Env() { unsetenv("TENSORACLE_CONV_DIRECT"); }
  };
  const Dims xd{2, 3, 21, 300};
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    // |sums| <= 3 * 49 * 4 + 8: integers, exact in float16; bfloat16 rounds the same exact sum once on both.
    const auto x = narrow(integers(static_cast<std::size_t>(xd.volume()), -2, 2, 801));
    const auto w7 = narrow(integers(64 * 3 * 49, -2, 2, 802)), w5 = narrow(integers(128 * 3 * 15, -2, 2, 803));
    const auto b64 = narrow(integers(64, -8, 8, 804));
    for (int variant = 0; variant < 3; ++variant) {
      auto graph = [&](Network& net) {
        auto* in = net.add_input("x", t, xd);
        if (variant < 2) {  // 7 x 7 / 2 with bias, then ReLU (fused) or a leaky ReLU (a pass)
          auto* c = net.add_convolution_nd(in, 64, {7, 7}, Weights(t, w7.data(), static_cast<std::int64_t>(w7.size()), nullptr),
                                           Weights(t, b64.data(), 64, nullptr));
          ConvolutionParams p = c->get();
          p.stride = {2, 2};
          p.pre_padding = p.post_padding = {3, 3};
          c->set(p);
          auto* a = net.add_activation(c->get_output(0), variant == 0 ? ActivationType::kRELU : ActivationType::kLEAKY_RELU);
          if (variant == 1) a->set_alpha(0.125f);
          a->get_output(0)->set_name("y");
          net.mark_output(a->get_output(0));
        } else {  // 5 x 3, stride (1, 2), 128 channels, no bias, into a max-pool (channels-last)
          auto* c = net.add_convolution_nd(in, 128, {5, 3}, Weights(t, w5.data(), static_cast<std::int64_t>(w5.size()), nullptr),
                                           Weights{});
          ConvolutionParams p = c->get();
          p.stride = {1, 2};
          p.pre_padding = p.post_padding = {2, 1};
          c->set(p);
          auto* pl = net.add_pooling_nd(c->get_output(0), PoolingType::kMAX, {3, 3});
          PoolingParams q = pl->get();
          q.stride = {2, 2};
          pl->set(q);
          pl->get_output(0)->set_name("y");
          net.mark_output(pl->get_output(0));
        }
      };
      auto build = [&](const char* device) { return fixed_engine(graph, xd, device, 3); };
      const std::string what = std::string(t == DataType::kHALF ? "float16" : "bfloat16") + " variant " + std::to_string(variant);
      std::vector<std::byte> bytes;
      {
        Env env;
        bytes = build("cuda:0");
      }
      Engine e = Engine::deserialize(bytes);
      if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
      const auto layers = e.layers();
      ASSERT_FALSE(layers.empty());
      EXPECT_NE(layers[0].tactic.find("/l:4/"), std::string::npos) << what << ": " << layers[0].tactic;
      EXPECT_NE(layers[0].tactic.find("/cfg:direct/"), std::string::npos) << what << ": " << layers[0].tactic;
      EXPECT_EQ(layers[0].tactic.find("/o:1/") != std::string::npos, variant == 2) << what << ": " << layers[0].tactic;
      auto run = [&](const std::vector<std::byte>& b) { return Engine::deserialize(b).create_execution().run({{"x", {t, xd, x.data()}}}); };
      const auto ref = run(build("cpu"));
      const auto got = run(bytes);
      const auto& ra = ref.at("y");
      const auto& ga = got.at("y");
      ASSERT_EQ(ra.dims, ga.dims) << what;
      const auto* pa = reinterpret_cast<const std::uint16_t*>(ra.data.get());
      const auto* pb = reinterpret_cast<const std::uint16_t*>(ga.data.get());
      std::size_t first = 0;
      const std::size_t differ = differing(pa, pb, static_cast<std::size_t>(ra.dims.volume()), first);
      EXPECT_EQ(differ, 0u) << what << ": first at " << first << " (cpu " << pa[first] << ", cuda " << pb[first] << ")";
      EXPECT_EQ(run(bytes).at("y").dims, ga.dims) << what;  // reopened
    }
  }
}

// A workspace limit that covers what a cuDNN convolution engine needs builds the same kind of
// engine (cuDNN's configurations within the scratch left, the backend's own path reserved as the
// fallback) and computes the same results.
TEST(Cuda, WorkspaceLimitAtWhatACudnnConvolutionNeeds) {
  static std::vector<float> w = uniform(16 * 8 * 3 * 3, -0.3f, 0.3f, 33);
  auto graph = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2, 8, 11, 11});
    auto* l = net.add_convolution_nd(x, 16, {3, 3}, Weights(DataType::kFLOAT, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                     Weights());
    ConvolutionParams p = l->get();
    p.pre_padding = p.post_padding = {1, 1};
    l->set(p);
    auto* y = net.add_activation(l->get_output(0), ActivationType::kRELU)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  auto x = uniform(2 * 8 * 11 * 11, -1.f, 1.f, 34);
  const std::map<std::string, HostTensorView> in = {{"x", {DataType::kFLOAT, {2, 8, 11, 11}, x.data()}}};
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({2, 8, 11, 11});
  d.settings.device = "cpu";
  auto cpu = Engine::deserialize(build_serialized_engine(graph, d)).create_execution().run(in);
  d.settings.device = "cuda:0";
  for (int level : {0, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    d.settings.optimization_level = level;
    d.settings.workspace_limit = 0;
    Engine unlimited = Engine::deserialize(build_serialized_engine(graph, d));
    if (nlohmann::json::parse(unlimited.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
    const auto memory = nlohmann::json::parse(unlimited.plan_json())["memory"];
    d.settings.workspace_limit = memory["arena_bytes"].get<std::uint64_t>() + memory["workspace_bytes"].get<std::uint64_t>();
    Engine e = Engine::deserialize(build_serialized_engine(graph, d));
    EXPECT_TRUE(e.layers()[0].tactic.starts_with("cuda.convolution.cudnn/")) << e.layers()[0].tactic;
    const auto limited = nlohmann::json::parse(e.plan_json())["memory"];
    EXPECT_LE(limited["arena_bytes"].get<std::uint64_t>() + limited["workspace_bytes"].get<std::uint64_t>(), d.settings.workspace_limit);
    auto gpu = e.create_execution().run(in);
    const auto* pa = reinterpret_cast<const float*>(cpu.at("y").data.get());
    const auto* pb = reinterpret_cast<const float*>(gpu.at("y").data.get());
    for (std::int64_t i = 0; i < 2 * 16 * 11 * 11; ++i) ASSERT_NEAR(pb[i], pa[i], 2e-5 * (1 + std::fabs(pa[i]))) << i;
  }
}

// Q/DQ around a matrix multiply runs as an int8 (int32 sums) or fp8 GEMM on the GPU and agrees
// with the CPU backend (which multiplies the dequantized operands): shapes cuBLASLt takes (K
// and N multiples of 16) and shapes that fall back to dequantize + float GEMM; float32 and
// float16 results; the bias and GELU (tanh) epilogue; heuristic and timed algorithms.
TEST(Cuda, QuantizedProductsMatchTheCpuBackend) {
  struct Case {
    DataType quantized, result;
    int k, n, level;
    std::uint64_t workspace_limit = 0;  // 1 MiB: cuBLASLt's scratch shrinks to what is left
  };
  const Case cases[] = {
      {DataType::kINT8, DataType::kFLOAT, 64, 48, 0},  {DataType::kINT8, DataType::kHALF, 64, 48, 3},
      {DataType::kINT8, DataType::kFLOAT, 40, 24, 0},  {DataType::kFP8, DataType::kFLOAT, 64, 48, 3},
      {DataType::kFP8, DataType::kHALF, 64, 48, 0},    {DataType::kFP8, DataType::kBF16, 128, 32, 3},
      {DataType::kFP8, DataType::kHALF, 40, 24, 0},    {DataType::kINT8, DataType::kFLOAT, 64, 48, 3, 1 << 20},
      {DataType::kINT8, DataType::kFLOAT, 40, 24, 0, 1 << 20}, {DataType::kFP8, DataType::kHALF, 64, 48, 3, 1 << 20},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(type_name(c.quantized)) + " -> " + std::string(type_name(c.result)) + ", K=" + std::to_string(c.k) +
                 " N=" + std::to_string(c.n) + ", level " + std::to_string(c.level) + ", workspace limit " +
                 std::to_string(c.workspace_limit));
    const std::vector<float> w = uniform(static_cast<std::size_t>(c.k * c.n), -0.25f, 0.25f, 51);
    const std::vector<float> bias = uniform(static_cast<std::size_t>(c.n), -0.5f, 0.5f, 52);
    const float limit = c.quantized == DataType::kINT8 ? 127.f : 448.f;
    const float xs = 1.f / limit, ws = 0.25f / limit;
    auto graph = [&](Network& net) {
      auto constant = [&](Dims d, const float* v) {
        return net.add_constant(d, Weights::copy_of(DataType::kFLOAT, v, d.volume()))->get_output(0);
      };
      auto qdq = [&](Tensor* t, const float& scale) {
        auto* s = constant({1}, &scale);
        auto* q = net.add_quantize(t, s, c.quantized)->get_output(0);
        return net.add_dequantize(q, s, c.result)->get_output(0);
      };
      auto* x = net.add_input("features", DataType::kFLOAT, {-1, c.k});
      auto* a = qdq(c.result == DataType::kFLOAT ? x : net.add_cast(x, c.result)->get_output(0), xs);
      auto* b = qdq(constant({c.k, c.n}, w.data()), ws);
      auto* y = net.add_matrix_multiply(a, MatrixOperation::kNONE, b, MatrixOperation::kNONE)->get_output(0);
      auto* bias_t = net.add_cast(constant({1, c.n}, bias.data()), c.result)->get_output(0);
      y = net.add_elementwise(y, bias_t, ElementWiseOperation::kSUM)->get_output(0);
      y = net.add_activation(y, ActivationType::kGELU_TANH)->get_output(0);
      if (c.result != DataType::kFLOAT) y = net.add_cast(y, DataType::kFLOAT)->get_output(0);
      y->set_name("result");
      net.mark_output(y);
    };
    std::vector<float> outs[2];
    for (int dev = 0; dev < 2; ++dev) {
      EngineBuild d;
      d.inputs["features"] = InputShape::ranged({1, c.k}, {16, c.k}, {96, c.k});
      d.settings.device = dev ? "cuda:0" : "cpu";
      d.settings.optimization_level = c.level;
      d.settings.workspace_limit = c.workspace_limit;
      Engine e = Engine::deserialize(build_serialized_engine(graph, d));
      if (dev && c.workspace_limit) {
        const auto memory = nlohmann::json::parse(e.plan_json())["memory"];
        EXPECT_LE(memory["arena_bytes"].get<std::uint64_t>() + memory["workspace_bytes"].get<std::uint64_t>(), c.workspace_limit);
      }
      bool folded = false;
      for (const auto& l : e.layers())
        if (l.type == "matrix_multiply") {
          folded = l.precision == type_name(c.quantized);
          if (dev) {
            EXPECT_NE(l.tactic.find("." + std::string(type_name(c.quantized))), std::string::npos) << l.tactic;
          }
        }
      EXPECT_TRUE(folded);
      auto exec = e.create_execution();
      for (int rows : {96, 33}) {
        auto x = uniform(static_cast<std::size_t>(rows * c.k), -1.f, 1.f, 53u + static_cast<unsigned>(rows));
        auto r = exec.run({{"features", {DataType::kFLOAT, {rows, c.k}, x.data()}}});
        const auto* p = reinterpret_cast<const float*>(r.at("result").data.get());
        outs[dev].insert(outs[dev].end(), p, p + rows * c.n);
      }
    }
    ASSERT_EQ(outs[0].size(), outs[1].size());
    // float16/bfloat16 results: the CPU rounds the dequantized operands and the product to them,
    // the GPU only the product. fp8 tensor cores accumulate with fewer mantissa bits than
    // float32 between cuBLASLt's promotions (measured: 5e-4 here); int8 sums are exact.
    const double tol = c.result == DataType::kBF16   ? 2e-2
                       : c.result == DataType::kHALF ? 4e-3
                       : c.quantized == DataType::kFP8 ? 2e-3
                                                       : 2e-4;
    double worst = 0;
    for (std::size_t i = 0; i < outs[0].size(); ++i) worst = std::max(worst, std::fabs(double(outs[1][i]) - outs[0][i]));
    EXPECT_LT(worst, tol);
  }
}

// The first product's epilogue ends in GELU then the next layer's quantize, which the CUDA
// backend runs as one pass (activation_quantize): bit-identical to the two passes of the graph
// where the GELU output is also an output, and close to the CPU backend.
TEST(Cuda, FusedActivationQuantizeMatchesSeparatePasses) {
  for (DataType q : {DataType::kINT8, DataType::kFP8})
    for (DataType compute : {DataType::kFLOAT, DataType::kHALF}) {
      SCOPED_TRACE(std::string(type_name(q)) + " around " + std::string(type_name(compute)));
      auto x = uniform(40 * 32, -1.f, 1.f, 71);
      auto run = [&](const char* device, bool keep_apart) {
        EngineBuild d;
        d.inputs["features"] = InputShape::ranged({1, 32}, {16, 32}, {64, 32});
        d.settings.device = device;
        d.settings.optimization_level = 0;  // the same GEMM algorithms in both engines
        Engine e = Engine::deserialize(build_serialized_engine(tensoracle::testing::two_quantized_layers(q, compute, keep_apart), d));
        if (!keep_apart) {
          EXPECT_EQ(e.layers().size(), 3u);
        }
        auto r = e.create_execution().run({{"features", {DataType::kFLOAT, {40, 32}, x.data()}}}).at("result");
        const auto* p = reinterpret_cast<const float*>(r.data.get());
        return std::vector<float>(p, p + 40 * 8);
      };
      const auto fused = run("cuda:0", false), apart = run("cuda:0", true), cpu = run("cpu", false);
      EXPECT_EQ(fused, apart);
      double worst = 0;
      for (std::size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::fabs(double(fused[i]) - cpu[i]));
      // A GELU that differs by an ulp may round to the neighbouring quantum of the hidden scale.
      EXPECT_LT(worst, 2e-2);
    }
}

// Two fp8 linear layers as the MLP bench builds them (Q/DQ around float16 products, weights
// [N, K] used transposed, bias, GELU erf): on an sm90 GPU the builder may put both into the
// backend's fused fp8 GEMM (tactic cuda.gemm.sm90.fp8.epilogue<n>: bias + GELU + the next
// quantize; bias + GELU), which TENSORACLE_FP8_FUSED=1 forces here. Its results match the
// cuBLASLt + pass engine's (the epilogue table is those passes' arithmetic; only the bias add
// before the float16 rounding may round differently) and the CPU backend's; 200 rows (a partial
// second row tile), 1, 33 and 300 rows through a ranged engine, a CUDA graph replay; tactics
// that do not match the node are refused.
TEST(Cuda, FusedFp8GemmMatchesCublasltAndTheCpuBackend) {
  constexpr int K = 256, N1 = 640, N2 = 144;
  const std::vector<float> w1 = uniform(N1 * K, -0.25f, 0.25f, 81), w2 = uniform(N2 * N1, -0.25f, 0.25f, 82);
  const std::vector<float> b1 = uniform(N1, -0.5f, 0.5f, 83), b2 = uniform(N2, -0.5f, 0.5f, 84);
  const float xs = 1.f / 448, ws = 0.25f / 448, hs = 4.f / 448;
  auto graph = [&](Network& net) {
    auto constant = [&](Dims d, const float* v) {
      return net.add_constant(d, Weights::copy_of(DataType::kFLOAT, v, d.volume()))->get_output(0);
    };
    auto qdq = [&](Tensor* t, const float& scale) {
      auto* sc = constant({1}, &scale);
      auto* q = net.add_quantize(t, sc, DataType::kFP8)->get_output(0);
      return net.add_dequantize(q, sc, DataType::kHALF)->get_output(0);
    };
    auto layer = [&](Tensor* t, float in_scale, const std::vector<float>& w, const std::vector<float>& b, int n, int k) {
      auto* y = net.add_matrix_multiply(qdq(t, in_scale), MatrixOperation::kNONE, qdq(constant({n, k}, w.data()), ws),
                                        MatrixOperation::kTRANSPOSE)
                    ->get_output(0);
      auto* bias = net.add_cast(constant({1, n}, b.data()), DataType::kHALF)->get_output(0);
      y = net.add_elementwise(y, bias, ElementWiseOperation::kSUM)->get_output(0);
      return net.add_activation(y, ActivationType::kGELU_ERF)->get_output(0);
    };
    auto* x = net.add_input("x", DataType::kHALF, {-1, K});
    auto* y = layer(layer(x, xs, w1, b1, N1, K), hs, w2, b2, N2, N1);
    y->set_name("y");
    net.mark_output(y);
  };
  struct Env {
    explicit Env(const char* v) { setenv("TENSORACLE_FP8_FUSED", v, 1); }
    ~Env() { unsetenv("TENSORACLE_FP8_FUSED"); }
  };
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const bool sm90 = prop.major == 9 && prop.minor == 0;
  const Dims xd{200, K};
  const std::vector<std::uint16_t> x = to_16bit(DataType::kHALF, uniform(200 * K, -1.f, 1.f, 85));
  std::vector<std::byte> fused_bytes, lt_bytes;
  {
    Env env("1");
    fused_bytes = fixed_engine(graph, xd, "cuda:0", 3);
  }
  {
    Env env("0");
    lt_bytes = fixed_engine(graph, xd, "cuda:0", 3);
  }
  std::vector<std::string> fused_tactics;
  for (const auto& l : Engine::deserialize(fused_bytes).layers())
    if (l.type == "matrix_multiply") fused_tactics.push_back(l.tactic);
  ASSERT_EQ(fused_tactics.size(), 2u);
  if (sm90) {
    EXPECT_EQ(fused_tactics[0], "cuda.gemm.sm90.fp8.epilogue3");
    EXPECT_EQ(fused_tactics[1], "cuda.gemm.sm90.fp8.epilogue2");
  }
  for (const auto& l : Engine::deserialize(lt_bytes).layers()) {
    if (l.type == "matrix_multiply") {
      EXPECT_TRUE(l.tactic.starts_with("cuda.gemm.cublaslt.fp8")) << l.tactic;
    }
  }

  const std::vector<float> cpu = output_y(fixed_engine(graph, xd, "cpu", 0), DataType::kHALF, xd, x.data());
  const std::vector<float> fused = output_y(fused_bytes, DataType::kHALF, xd, x.data());
  const std::vector<float> lt = output_y(lt_bytes, DataType::kHALF, xd, x.data());
  ASSERT_EQ(fused.size(), cpu.size());
  ASSERT_EQ(lt.size(), cpu.size());
  // Against the CPU (which rounds the product and then the bias sum to float16): a hidden value
  // whose float16 differs by an ulp can quantize to the neighbouring fp8 code, a step of up to
  // 16 codes x 4/448 at the top of the range, which moves a second-layer output by up to about
  // 0.14 x 0.25; a few such per row stay under 0.1 relative, and the mean error within 2% (a
  // wrong product would be off by its own size).
  std::size_t differ = 0;
  double worst_lt = 0, worst_cpu = 0, err = 0, mag = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    differ += fused[i] != lt[i];
    worst_lt = std::max(worst_lt, std::fabs(double(fused[i]) - lt[i]) / (1 + std::fabs(lt[i])));
    worst_cpu = std::max(worst_cpu, std::fabs(double(fused[i]) - cpu[i]) / (1 + std::fabs(cpu[i])));
    err += std::fabs(double(fused[i]) - cpu[i]);
    mag += std::fabs(cpu[i]);
  }
  EXPECT_GT(mag / cpu.size(), 0.5);  // outputs of some size, not zeros everywhere
  EXPECT_LT(differ, cpu.size() / 100) << differ << " of " << cpu.size() << " differ from cuBLASLt + pass";
  EXPECT_LT(worst_lt, 2e-2);
  EXPECT_LT(worst_cpu, 0.1);
  EXPECT_LT(err, 2e-2 * mag);

  // One execution run twice (the second replays its CUDA graph; the table is built on the first),
  // with and without programmatic dependent launch (the same sums and table: bit for bit). The
  // second layer's 640-deep product takes the main loop's pairs of slices twice and its tail,
  // and loads its table after the first stages; the first layer's (256 deep) before them.
  struct ScopedEnv {  // (unset again also when an assertion returns early)
    const char* name;
    ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~ScopedEnv() { unsetenv(name); }
  };
  const char* const settings[][2] = {{"TENSORACLE_FP8_PDL", "1"}, {"TENSORACLE_FP8_PDL", "0"}};
  for (const auto& [name, value] : settings) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    const ScopedEnv setting(name, value);
    Engine e = Engine::deserialize(fused_bytes);
    auto exec = e.create_execution();
    for (int round = 0; round < 2; ++round) {
      auto r = exec.run({{"x", {DataType::kHALF, xd, x.data()}}});
      const auto* h = reinterpret_cast<const std::uint16_t*>(r.at("y").data.get());
      for (std::size_t i = 0; i < fused.size(); ++i)
        ASSERT_EQ(core::half_to_float(h[i]), fused[i]) << "round " << round << " at " << i;
    }
  }
  // Ranged rows: 1, 33 and 300 (three row tiles, the last partial) against the CPU.
  {
    Env env("1");
    EngineBuild d;
    d.inputs["x"] = InputShape::ranged({1, K}, {64, K}, {300, K});
    d.settings.device = "cuda:0";
    Engine e = Engine::deserialize(build_serialized_engine(graph, d));
    d.settings.device = "cpu";
    Engine c = Engine::deserialize(build_serialized_engine(graph, d));
    auto exec = e.create_execution(), cexec = c.create_execution();
    for (int rows : {1, 33, 300}) {
      const auto xr = to_16bit(DataType::kHALF, uniform(static_cast<std::size_t>(rows) * K, -1.f, 1.f, 86u + rows));
      auto g = exec.run({{"x", {DataType::kHALF, {rows, K}, xr.data()}}});
      auto h = cexec.run({{"x", {DataType::kHALF, {rows, K}, xr.data()}}});
      const auto* pg = reinterpret_cast<const std::uint16_t*>(g.at("y").data.get());
      const auto* ph = reinterpret_cast<const std::uint16_t*>(h.at("y").data.get());
      double worst = 0, err = 0, mag = 0;
      for (int i = 0; i < rows * N2; ++i) {
        const double a = core::half_to_float(pg[i]), b = core::half_to_float(ph[i]);
        worst = std::max(worst, std::fabs(a - b) / (1 + std::fabs(b)));
        err += std::fabs(a - b);
        mag += std::fabs(b);
      }
      EXPECT_LT(worst, 0.1) << rows << " rows";
      EXPECT_LT(err, 2e-2 * mag) << rows << " rows";
    }
  }
  // Malformed: a fused tactic whose op count is not the node's epilogue, or no such tactic.
  if (sm90) {
    for (const char* bad : {"cuda.gemm.sm90.fp8.epilogue2", "cuda.gemm.sm90.fp8.epilogue4", "cuda.gemm.sm90.fp8.epilogue03"}) {
      plan::Plan pl = plan::read_engine(fused_bytes, "test", nullptr);
      bool changed = false;
      for (auto& node : pl.graph.nodes)
        if (node.tactic == "cuda.gemm.sm90.fp8.epilogue3") node.tactic = bad, changed = true;
      ASSERT_TRUE(changed);
      EXPECT_THROW(Engine::deserialize(plan::write_engine(pl)), CorruptEngineError) << bad;
    }
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
