// The CUDA backend's quantized products against the CPU backend (label gpu): int8 and fp8
// GEMMs between Q/DQ, a fused activation + quantize pass, and the fused fp8 GEMM.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/numeric.h"
#include "cuda_test_helpers.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "qdq_models.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using tensoracle::testing::fixed_engine;
using tensoracle::testing::output_y;
using tensoracle::testing::to_16bit;
using tensoracle::testing::uniform;

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
            EXPECT_TRUE(l.tactic.starts_with("cuda.gemm.cublaslt " + std::string(type_name(c.quantized)))) << l.tactic;
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
    EXPECT_EQ(fused_tactics[0], "cuda.gemm.sm90.fp8 epilogue:3");
    EXPECT_EQ(fused_tactics[1], "cuda.gemm.sm90.fp8 epilogue:2");
  }
  for (const auto& l : Engine::deserialize(lt_bytes).layers()) {
    if (l.type == "matrix_multiply") {
      EXPECT_TRUE(l.tactic.starts_with("cuda.gemm.cublaslt fp8")) << l.tactic;
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
  // Malformed: a fused tactic whose op count is not the node's epilogue, or no such count; a
  // cuBLASLt tactic whose precision or epilogue is not the node's.
  if (sm90) {
    const graph::Tactic three(graph::FusedFp8GemmConfig{3});
    for (int ops : {2, 4}) {
      plan::Plan pl = plan::read_engine(fused_bytes, "test", nullptr);
      std::size_t changed = pl.graph.nodes.size();
      for (std::size_t i = 0; i < pl.graph.nodes.size(); ++i)
        if (pl.graph.nodes[i].tactic == three) changed = i;
      ASSERT_LT(changed, pl.graph.nodes.size());
      EXPECT_THROW(Engine::deserialize(plan::write_engine_with(
                       pl, [&](nlohmann::json& j) { j["nodes"][changed]["tactic"]["epilogue_ops"] = ops; })),
                   CorruptEngineError)
          << ops;
    }
  }
  for (const auto& [precision, ops] : {std::pair{graph::CublasLtConfig::Precision::kInt8, 0},
                                       std::pair{graph::CublasLtConfig::Precision::kFp8, 5}}) {
    plan::Plan pl = plan::read_engine(lt_bytes, "test", nullptr);
    bool changed = false;
    for (auto& node : pl.graph.nodes)
      if (auto* cfg = std::get_if<graph::CublasLtConfig>(&node.tactic.config)) {
        cfg->precision = precision;
        if (ops) cfg->epilogue_ops = ops;
        changed = true;
      }
    ASSERT_TRUE(changed);
    EXPECT_THROW(Engine::deserialize(plan::write_engine(pl)), CorruptEngineError);
  }
}
