// The CUDA backend's convolutions against the CPU backend (label gpu): the backend's own kernel,
// cuDNN's plans at the profile's shapes and the own path at others, a residual add and ReLU in
// one pass, and a workspace limit at what a cuDNN convolution needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "core/numeric.h"
#include "cuda_test_helpers.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using tensoracle::testing::to_16bit;
using tensoracle::testing::uniform;

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
          EXPECT_EQ(tactic.rfind(c.groups == cin ? "cuda.convolution" : "cuda.convolution.cudnn ", 0), 0u)
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
        if (level != 0 || !tactic.starts_with("cuda.convolution.cudnn ")) continue;
        // An engine index cuDNN does not have: the backend's own convolution, same values.
        plan::Plan pl = plan::read_engine(bytes, "test", nullptr);
        std::size_t ci = 0;
        while (ci < pl.graph.nodes.size() && pl.graph.nodes[ci].tactic.kernel != graph::kCudnnConvKernel) ++ci;
        ASSERT_LT(ci, pl.graph.nodes.size()) << what;
        const graph::Tactic built = pl.graph.nodes[ci].tactic;
        auto edited = [&](auto change) {
          graph::CudnnConvConfig cfg = std::get<graph::CudnnConvConfig>(built.config);
          change(cfg);
          return graph::Tactic(std::move(cfg));
        };
        pl.graph.nodes[ci].tactic = edited([](graph::CudnnConvConfig& cfg) {
          cfg.engine = 999999;
          cfg.knobs.clear();
          cfg.workspace = 0;
        });
        auto fallback = Engine::deserialize(plan::write_engine(pl)).create_execution().run({{"x", {t, c.x, xp}}});
        const std::vector<float> fb = floats(fallback.at("y"));
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(fb[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " (fallback) at " << i;
        // An engine built before the bias pass: the bias written into y first, cuDNN accumulating.
        if (c.bias) {
          ASSERT_FALSE(std::get<graph::CudnnConvConfig>(built.config).problem.accumulate) << tactic;
          pl.graph.nodes[ci].tactic = edited([](graph::CudnnConvConfig& cfg) { cfg.problem.accumulate = true; });
          auto old = Engine::deserialize(plan::write_engine(pl)).create_execution().run({{"x", {t, c.x, xp}}});
          const std::vector<float> ov = floats(old.at("y"));
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(ov[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " (a:1 tactic) at " << i;
        }
        // Padding after described as symmetric (the least the last window needs is 0 here); an
        // engine that stored the least describes the same problem and runs the same plan.
        const auto& cfg = std::get<graph::CudnnConvConfig>(built.config).problem;
        if (cfg.stride == std::vector<std::int64_t>{2, 2} && cfg.dilation == std::vector<std::int64_t>{1, 1} &&
            cfg.pre == std::vector<std::int64_t>{1, 1} && cfg.post == std::vector<std::int64_t>{1, 1}) {
          pl.graph.nodes[ci].tactic = edited([](graph::CudnnConvConfig& c2) { c2.problem.post = {0, 0}; });
          auto least = Engine::deserialize(plan::write_engine(pl)).create_execution().run({{"x", {t, c.x, xp}}});
          const std::vector<float> lv = floats(least.at("y"));
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(lv[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " (q:0x0 tactic) at " << i;
        } else if (c.stride == Dims{2, 2} && c.kernel == Dims{3, 3}) {
          ADD_FAILURE() << what << ": expected symmetric padding in " << tactic;
        }
        // Malformed: the plan's reader refuses them.
        pl.graph.nodes[ci].tactic = built;
        for (const char* field : {"x", "workspace"}) {
          EXPECT_THROW(Engine::deserialize(plan::write_engine_with(pl, [&](nlohmann::json& j) {
                         auto& t = j["nodes"][ci]["tactic"];
                         if (std::string(field) == "x") t["x"] = {1};
                         else t.erase(field);
                       })),
                       CorruptEngineError)
              << what << ": " << field;
        }
      }
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
  EXPECT_TRUE(engines[1].layers()[0].tactic.starts_with("cuda.convolution.cudnn float32 x:2x8x11x11 "))
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
    EXPECT_TRUE(e.layers()[0].tactic.starts_with("cuda.convolution.cudnn ")) << e.layers()[0].tactic;
    const auto limited = nlohmann::json::parse(e.plan_json())["memory"];
    EXPECT_LE(limited["arena_bytes"].get<std::uint64_t>() + limited["workspace_bytes"].get<std::uint64_t>(), d.settings.workspace_limit);
    auto gpu = e.create_execution().run(in);
    const auto* pa = reinterpret_cast<const float*>(cpu.at("y").data.get());
    const auto* pb = reinterpret_cast<const float*>(gpu.at("y").data.get());
    for (std::int64_t i = 0; i < 2 * 16 * 11 * 11; ++i) ASSERT_NEAR(pb[i], pa[i], 2e-5 * (1 + std::fabs(pa[i]))) << i;
  }
}
