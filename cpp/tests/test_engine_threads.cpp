// Executions of one engine on many threads (docs/execution.md): every CPU tactic gives the
// same bits as one thread, and one Execution used from two threads at once is refused.
// Before issue 30 the oneDNN matrix multiply shared one primitive, run concurrently in
// oneDNN's library-scratchpad mode, and gave wrong results now and then.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using tensoracle::testing::uniform;

namespace {

// Restores the process-wide CPU thread count.
struct CpuThreads {
  int saved = cpu_threads();
  explicit CpuThreads(int n) { set_cpu_threads(n); }
  ~CpuThreads() { set_cpu_threads(0); }
};

struct Model {
  std::string input;
  Dims dims;  // of one input
  std::vector<std::byte> engine;
};

// One matrix multiply [rows, k] x [k, n] by a constant, plus a bias and a ReLU (fused).
Model matmul_model(int k) {
  static std::vector<std::vector<float>> keep;
  keep.push_back(uniform(static_cast<std::size_t>(k) * 96, -0.2f, 0.2f, 5u + static_cast<unsigned>(k)));
  keep.push_back(uniform(96, -0.1f, 0.1f, 6));
  const float* w = keep[keep.size() - 2].data();
  const float* b = keep.back().data();
  auto graph = [=](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {-1, k});
    auto* c = net.add_constant({k, 96}, Weights(DataType::kFLOAT, w, static_cast<std::int64_t>(k) * 96, nullptr))->get_output(0);
    auto* bias = net.add_constant({1, 96}, Weights(DataType::kFLOAT, b, 96, nullptr))->get_output(0);
    auto* y = net.add_matrix_multiply(x, MatrixOperation::kNONE, c, MatrixOperation::kNONE)->get_output(0);
    y = net.add_elementwise(y, bias, ElementWiseOperation::kSUM)->get_output(0);
    y = net.add_activation(y, ActivationType::kRELU)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1, k}, {48, k}, {64, k});
  d.settings.device = "cpu";
  return {"x", Dims{48, k}, build_serialized_engine(graph, d)};
}

// A 3x3 convolution with bias and ReLU, then a second one. When the first one's result is an
// output too, both take any convolution tactic; else the first one stores its output
// channels-last for the second (Value::layout).
Model conv_model(bool first_is_output) {
  static const std::vector<float> w = uniform(16 * 16 * 9, -0.2f, 0.2f, 7), b = uniform(16, -0.1f, 0.1f, 8);
  auto graph = [=](Network& net) {
    Tensor* t = net.add_input("x", DataType::kFLOAT, {2, 16, 12, 12});
    for (int i = 0; i < 2; ++i) {
      auto* l = net.add_convolution_nd(t, 16, {3, 3}, Weights(DataType::kFLOAT, w.data(), 16 * 16 * 9, nullptr),
                                       Weights(DataType::kFLOAT, b.data(), 16, nullptr));
      ConvolutionParams p = l->get();
      p.pre_padding = p.post_padding = {1, 1};
      l->set(p);
      t = net.add_activation(l->get_output(0), ActivationType::kRELU)->get_output(0);
      if (i == 0 && first_is_output) {
        t->set_name("first");
        net.mark_output(t);
      }
    }
    t->set_name("y");
    net.mark_output(t);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({2, 16, 12, 12});
  d.settings.device = "cpu";
  return {"x", Dims{2, 16, 12, 12}, build_serialized_engine(graph, d)};
}

// The engine with every node of `layer` on `tactic` (the builder's choice when empty).
std::vector<std::byte> with_tactic(const std::vector<std::byte>& engine, const std::string& layer, const std::string& tactic) {
  if (tactic.empty()) return engine;
  auto p = plan::read_engine(engine, "model", nullptr);
  return plan::write_engine_with(p, [&](nlohmann::json& j) {
    for (auto& n : j["nodes"])
      if (n["layer"] == layer) n["tactic"] = {{"kernel", tactic}};
  });
}

std::vector<std::byte> output_bytes(Execution& x, const std::string& input, const Dims& dims, const std::vector<float>& data) {
  auto out = x.run({{input, {DataType::kFLOAT, dims, data.data()}}});
  const auto& y = out.at("y");
  const auto* p = reinterpret_cast<const std::byte*>(y.data.get());
  return {p, p + y.nbytes};
}

// Four threads, each with its own execution of one engine, run `rounds` times on inputs of
// their own; every result must equal the one-thread result bit for bit.
void expect_threads_match_one_thread(const Model& m, const std::vector<std::byte>& file, int rounds) {
  Engine e = Engine::deserialize(file);
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<std::byte>> expected;
  {
    auto x = e.create_execution();
    for (int t = 0; t < kThreads; ++t) {
      inputs.push_back(uniform(static_cast<std::size_t>(m.dims.volume()), -1.f, 1.f, 40u + static_cast<unsigned>(t)));
      expected.push_back(output_bytes(x, m.input, m.dims, inputs.back()));
    }
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto x = e.create_execution();
      for (int r = 0; r < rounds; ++r)
        if (output_bytes(x, m.input, m.dims, inputs[static_cast<std::size_t>(t)]) != expected[static_cast<std::size_t>(t)]) ++wrong;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0) << "of " << kThreads * rounds << " runs";
}

TEST(EngineThreads, MatrixMultipliesOnEveryTacticMatchOneThread) {
  CpuThreads one(1);
  for (int k : {256, 1024}) {
    const Model m = matmul_model(k);
    for (const char* tactic : {"", "cpu.gemm.onednn", "cpu.gemm.openblas"}) {
      SCOPED_TRACE("k " + std::to_string(k) + ", tactic '" + tactic + "'");
      const auto file = with_tactic(m.engine, "matrix_multiply", tactic);
      const auto layers = Engine::deserialize(file).layers();
      if (*tactic) {
        ASSERT_EQ(layers[0].tactic, tactic);
      }
      expect_threads_match_one_thread(m, file, 400);
    }
  }
}

TEST(EngineThreads, ConvolutionsOnEveryTacticMatchOneThread) {
  CpuThreads one(1);
  {
    SCOPED_TRACE("channels-last between the convolutions");
    const Model m = conv_model(false);
    const auto layers = Engine::deserialize(m.engine).layers();
    ASSERT_EQ(layers[0].tactic, "cpu.conv.onednn");
    ASSERT_EQ(layers[0].output_layout, "channels_last");
    expect_threads_match_one_thread(m, m.engine, 100);
  }
  const Model m = conv_model(true);
  for (const char* tactic : {"cpu.conv.onednn", "cpu.conv.im2col_gemm"}) {
    SCOPED_TRACE(std::string("tactic '") + tactic + "'");
    expect_threads_match_one_thread(m, with_tactic(m.engine, "convolution", tactic), 100);
  }
}

// Several CPU threads per execution too (each execution's kernels fan out with OpenMP).
TEST(EngineThreads, ExecutionsOfManyCpuThreadsEachMatchOneThread) {
  CpuThreads two(2);
  const Model m = matmul_model(512);
  expect_threads_match_one_thread(m, m.engine, 100);
}

// One Execution from two threads: the second thread's call is refused while the first is
// inside one; the first thread's results stay right.
TEST(EngineThreads, OneExecutionUsedFromTwoThreadsRaises) {
  CpuThreads one(1);
  const Model m = matmul_model(1024);
  Engine e = Engine::deserialize(m.engine);
  auto x = e.create_execution();
  const auto input = uniform(static_cast<std::size_t>(m.dims.volume()), -1.f, 1.f, 3);
  const auto expected = output_bytes(x, m.input, m.dims, input);
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0}, refused{0}, other{0};
  std::mutex mu;
  std::string message;
  // Either thread may be the one refused; a refused call changes nothing.
  std::thread runner([&] {
    for (int r = 0; r < 300; ++r) {
      try {
        if (output_bytes(x, m.input, m.dims, input) != expected) ++wrong;
      } catch (const InvalidArgument& err) {
        std::lock_guard lock(mu);
        if (refused++ == 0) message = err.what();
      } catch (...) {
        ++other;
      }
    }
    done = true;
  });
  while (!done) {
    try {
      (void)x.tensor_shape("y");
    } catch (const InvalidArgument& err) {
      std::lock_guard lock(mu);
      if (refused++ == 0) message = err.what();
    } catch (...) {
      ++other;
    }
  }
  runner.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_NE(message.find("in use by another thread"), std::string::npos) << message;
  // Idle again: any thread may use it.
  std::thread([&] { EXPECT_EQ(output_bytes(x, m.input, m.dims, input), expected); }).join();
}

}  // namespace
