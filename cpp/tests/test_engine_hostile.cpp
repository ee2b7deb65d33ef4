// Engine files that say something wrong, written with a valid digest (anyone can recompute
// one): each must be refused with CorruptEngineError before anything is allocated or run.
// One test per hole found by the review of 153b621 (issue 30): every one of them crashed,
// overflowed a buffer or returned unwritten memory there.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using tensoracle::testing::uniform;
using Edit = std::function<void(nlohmann::json&)>;

namespace {

// x [-1, 8, 10, 10] -> 3x3 convolution (+ ReLU) -> matrix multiply by a constant -> y, and the
// convolution's output summed over its channels -> s. The convolution needs scratch (its
// unfolded input), its output lives in the arena, and the product has two inputs.
std::vector<std::byte> conv_engine() {
  static const std::vector<float> w = uniform(8 * 8 * 9, -0.3f, 0.3f, 11), m = uniform(10 * 10, -0.3f, 0.3f, 12);
  auto graph = [](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {-1, 8, 10, 10});
    auto* conv = net.add_convolution_nd(x, 8, {3, 3}, Weights(DataType::kFLOAT, w.data(), 576, nullptr), Weights());
    ConvolutionParams p = conv->get();
    p.pre_padding = p.post_padding = {1, 1};
    conv->set(p);
    conv->set_name("conv");
    auto* r = net.add_activation(conv->get_output(0), ActivationType::kRELU)->get_output(0);
    auto* c = net.add_constant({1, 1, 10, 10}, Weights(DataType::kFLOAT, m.data(), 100, nullptr))->get_output(0);
    auto* mm = net.add_matrix_multiply(r, MatrixOperation::kNONE, c, MatrixOperation::kNONE);
    mm->set_name("product");
    auto* y = mm->get_output(0);
    y->set_name("y");
    net.mark_output(y);
    auto* s = net.add_reduce(r, ReduceOperation::kSUM, 0x2, true)->get_output(0);
    s->set_name("s");
    net.mark_output(s);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1, 8, 10, 10}, {2, 8, 10, 10}, {4, 8, 10, 10});
  d.settings.device = "cpu";
  return build_serialized_engine(graph, d);
}

struct Hostile : ::testing::Test {
  static void SetUpTestSuite() {
    bytes = new std::vector<std::byte>(conv_engine());
    plan = new plan::Plan(plan::read_engine(*bytes, "seed", nullptr));
    doc = new nlohmann::json(plan::plan_to_json(*plan));
  }
  static void TearDownTestSuite() {
    delete doc;
    delete plan;
    delete bytes;
  }
  static inline std::vector<std::byte>* bytes = nullptr;
  static inline plan::Plan* plan = nullptr;
  static inline nlohmann::json* doc = nullptr;

  // Value ids and node indices of the seed, by name.
  static int value(const std::string& name) {
    for (std::size_t v = 0; v < plan->graph.values.size(); ++v)
      if (plan->graph.values[v].name == name) return static_cast<int>(v);
    ADD_FAILURE() << "no value " << name;
    return -1;
  }
  static int node(const std::string& name) {
    for (std::size_t n = 0; n < plan->graph.nodes.size(); ++n)
      if (plan->graph.nodes[n].name == name) return static_cast<int>(n);
    ADD_FAILURE() << "no node " << name;
    return -1;
  }
  static int constant() {
    for (std::size_t v = 0; v < plan->graph.values.size(); ++v)
      if (plan->graph.values[v].constant) return static_cast<int>(v);
    return -1;
  }

  // Opens the edited plan: it must be refused as corrupt, saying `what`.
  static void expect_corrupt(const std::string& what, const std::vector<std::byte>& file) {
    try {
      Engine e = Engine::deserialize(file);
      // Anything that opens must at least run without touching memory it does not own.
      std::vector<float> x(4 * 8 * 10 * 10, 0.5f);
      e.create_execution().run({{"x", {DataType::kFLOAT, {4, 8, 10, 10}, x.data()}}});
      ADD_FAILURE() << "accepted a plan that should say: " << what;
    } catch (const CorruptEngineError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << "expected '" << what << "' in: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected CorruptEngineError saying '" << what << "', got: " << e.what();
    }
  }
  static void expect_corrupt(const std::string& what, const Edit& edit) {
    expect_corrupt(what, plan::write_engine_with(*plan, edit));
  }
};

TEST_F(Hostile, TheSeedOpensAndRuns) {
  ASSERT_GT((*doc)["memory"]["workspace_bytes"].get<std::uint64_t>(), 0u);
  ASSERT_GT((*doc)["memory"]["arena_bytes"].get<std::uint64_t>(), 0u);
  Engine e = Engine::deserialize(plan::write_engine_with(*plan, [](nlohmann::json&) {}));
  std::vector<float> x(4 * 8 * 10 * 10, 0.5f);
  EXPECT_EQ(e.create_execution().run({{"x", {DataType::kFLOAT, {4, 8, 10, 10}, x.data()}}}).size(), 2u);
}

// Hole 2: sizes. A workspace below what a node needs made kernels write past the buffer; an
// arena of 2^64 - 1 bytes wrapped to 0 when rounded up, so every offset passed its check.
TEST_F(Hostile, SizesBelowWhatNodesNeedOrThatWrapAreCorrupt) {
  expect_corrupt("bytes of scratch at the profile's max", [](nlohmann::json& j) { j["memory"]["workspace_bytes"] = 0; });
  expect_corrupt("more than any device holds", [](nlohmann::json& j) { j["memory"]["workspace_bytes"] = ~std::uint64_t{0}; });
  expect_corrupt("larger than its activations laid end to end",
                 [](nlohmann::json& j) { j["memory"]["arena_bytes"] = ~std::uint64_t{0}; });
  expect_corrupt("larger than its activations laid end to end",
                 [](nlohmann::json& j) { j["memory"]["arena_bytes"] = ~std::uint64_t{0} - 255; });
  // A value planned smaller than its shape at the profile's max (the arena still holds it).
  const int conv_out = plan->graph.nodes[static_cast<std::size_t>(node("conv"))].output;
  expect_corrupt("is planned for", [&](nlohmann::json& j) { j["values"][conv_out]["max_bytes"] = 4; });
  // A profile max beyond the declared one: shapes, then sizes, disagree with the plan.
  expect_corrupt("is planned for", [](nlohmann::json& j) { j["io"][0]["max"] = {64, 8, 10, 10}; });
  // Dims whose byte count overflows 64 bits.
  expect_corrupt("more than any device holds", [](nlohmann::json& j) {
    j["io"][0]["max"] = {std::int64_t{1} << 40, 8, 10, 10};
  });
}

// Hole 3: a node's output that is a constant (its kernel wrote into the mapped weights) or a
// network input; values that are constants or inputs with a producer.
TEST_F(Hostile, ANodeCannotWriteAConstantOrAnInput) {
  const int c = constant(), x = value("x"), product = node("product");
  ASSERT_GE(c, 0);
  expect_corrupt("a network input or a constant", [&](nlohmann::json& j) {
    j["nodes"][product]["output"] = c;
    j["values"][c]["producer"] = product;
  });
  expect_corrupt("a network input or a constant", [&](nlohmann::json& j) {
    j["nodes"][product]["output"] = x;
    j["values"][x]["producer"] = product;
  });
  expect_corrupt("names a producer", [&](nlohmann::json& j) { j["values"][c]["producer"] = 0; });
  expect_corrupt("as its producer", [&](nlohmann::json& j) { j["values"][c]["producer"] = 1000000; });
}

// Hole 4: arity. A matrix multiply or unary node with too few inputs segfaulted in load and in
// `tensoracle inspect`; an epilogue operand of -1 read before a vector.
TEST_F(Hostile, NodesMustHaveTheirLayersNumberOfInputs) {
  const int product = node("product");
  expect_corrupt("matrix_multiply layers take 2", [&](nlohmann::json& j) { j["nodes"][product]["inputs"] = nlohmann::json::array(); });
  expect_corrupt("matrix_multiply layers take 2", [&](nlohmann::json& j) { j["nodes"][product]["inputs"].erase(1); });
  expect_corrupt("matrix_multiply layers take 2", [&](nlohmann::json& j) {
    auto& in = j["nodes"][product]["inputs"];
    in.push_back(in[0]);
  });
  // The convolution's fused ReLU turned into an elementwise sum without its operand.
  const int conv = node("conv");
  ASSERT_FALSE((*doc)["nodes"][conv]["epilogue"].empty());
  expect_corrupt("elementwise layers take 2", [&](nlohmann::json& j) {
    auto& op = j["nodes"][conv]["epilogue"][0];
    op["layer"] = "elementwise";
    op["params"] = {{"op", "SUM"}};
    op["operand"] = -1;
  });
  expect_corrupt("reads value id -7", [&](nlohmann::json& j) { j["nodes"][conv]["epilogue"][0]["operand"] = -7; });
  expect_corrupt("activation layers take 1", [&](nlohmann::json& j) { j["nodes"][conv]["epilogue"][0]["operand"] = 0; });
  // Only pointwise layers are fused.
  expect_corrupt("only activation, elementwise, cast and quantize layers are fused", [&](nlohmann::json& j) {
    auto& op = j["nodes"][conv]["epilogue"][0];
    op["layer"] = "softmax";
    op["params"] = {{"axes", 2}};
  });
}

// Hole 5: the network's input ids.
TEST_F(Hostile, NetworkInputIdsMustNameInputValues) {
  expect_corrupt("names value id 1000000000", [](nlohmann::json& j) { j["inputs"] = {1000000000}; });
  expect_corrupt("names value id -1", [](nlohmann::json& j) { j["inputs"] = {-1}; });
  const int c = constant();
  expect_corrupt("is not an input value", [&](nlohmann::json& j) { j["inputs"] = {c}; });
  const int x = value("x");
  expect_corrupt("is listed twice", [&](nlohmann::json& j) { j["inputs"] = {x, x}; });
}

// Hole 6: JSON nested a million levels deep anywhere in the plan or the target overflowed the
// stack when copied or walked.
TEST_F(Hostile, DeeplyNestedJsonIsRefusedBeforeItIsUsed) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  nlohmann::json j = *doc;
  j.erase("build");
  std::string text = j.dump();
  text.insert(text.size() - 1, ",\"build\":" + deep);
  expect_corrupt("nested deeper than 64 levels", plan::write_engine_text(*plan, text));
  expect_corrupt("nested deeper than 64 levels", plan::write_engine_text(*plan, doc->dump(), deep));
  // Within the limit: an ordinary refusal (the target is not an object), no crash.
  expect_corrupt("its target is not a JSON object", plan::write_engine_text(*plan, doc->dump(), "[[[]]]"));
  expect_corrupt("is not a string", plan::write_engine_text(*plan, doc->dump(), R"({"backend": ["cpu"]})"));
}

// Hole 12: two outputs naming one value: run() returned a buffer nothing wrote.
TEST_F(Hostile, AnOutputIsListedOnce) {
  const int y = value("y");
  expect_corrupt("is listed twice", [&](nlohmann::json& j) {
    j["outputs"][1] = y;
    j["io"][2]["value"] = y;
    j["io"][2]["name"] = "y2";
    j["io"][2]["dims"] = j["io"][1]["dims"];
    j["io"][2]["min"] = j["io"][1]["min"];
    j["io"][2]["opt"] = j["io"][1]["opt"];
    j["io"][2]["max"] = j["io"][1]["max"];
  });
  // An output that is not produced by any node (a network input as output).
  const int x = value("x");
  expect_corrupt("is not produced by a layer", [&](nlohmann::json& j) { j["outputs"][1] = x; });
}

// A CPU engine's tactics must be the CPU backend's kernels for that layer, and well-formed
// tactic objects (graph/tactic.h) to be read at all.
TEST_F(Hostile, TacticsOfAnotherBackendOrJunkAreCorrupt) {
  const int product = node("product");
  const nlohmann::json cublaslt = {{"kernel", "cuda.gemm.cublaslt"}, {"precision", "native"}, {"epilogue_ops", 2},
                                   {"algo", ""}, {"workspace", nullptr}};
  expect_corrupt("is not one of the CPU backend's kernels for this matrix_multiply layer",
                 [&](nlohmann::json& j) { j["nodes"][product]["tactic"] = cublaslt; });
  expect_corrupt("is not one of the CPU backend's kernels",
                 [&](nlohmann::json& j) { j["nodes"][product]["tactic"] = {{"kernel", "cpu.conv.im2col_gemm"}}; });
  // Malformed tactics: the reader's own messages, with the file's name.
  expect_corrupt("its plan has a tactic whose kernel name is malformed",
                 [&](nlohmann::json& j) { j["nodes"][product]["tactic"] = {{"kernel", "\x01junk"}}; });
  expect_corrupt("that is not an object naming its kernel",
                 [&](nlohmann::json& j) { j["nodes"][product]["tactic"] = "cpu.gemm.openblas"; });  // format 1's string
  expect_corrupt("with an unknown field 'algo'", [&](nlohmann::json& j) {
    j["nodes"][product]["tactic"] = {{"kernel", "cpu.gemm.openblas"}, {"algo", "00"}};
  });
  expect_corrupt("without its field 'workspace'", [&](nlohmann::json& j) {
    auto t = cublaslt;
    t.erase("workspace");
    j["nodes"][product]["tactic"] = t;
  });
  expect_corrupt("whose 'epilogue_ops' (65) is out of range", [&](nlohmann::json& j) {
    auto t = cublaslt;
    t["epilogue_ops"] = 65;
    j["nodes"][product]["tactic"] = t;
  });
  expect_corrupt("whose 'algo' is not lowercase hex bytes", [&](nlohmann::json& j) {
    auto t = cublaslt;
    t["algo"] = "0A";
    j["nodes"][product]["tactic"] = t;
  });
}

// Hole 8: a loaded engine file rewritten in place (truncated, then written again) raised SIGBUS
// in the process that had it open (the file was mapped). Engine::load now owns its bytes.
TEST_F(Hostile, AnEngineFileRewrittenInPlaceDoesNotDisturbTheOpenEngine) {
  const auto path = std::filesystem::temp_directory_path() / ("rewritten_" + std::to_string(::getpid()) + ".engine");
  save_engine(*bytes, path);
  Engine e = Engine::load(path);
  std::vector<float> x(4 * 8 * 10 * 10, 0.25f);
  auto exec = e.create_execution();
  const auto before = exec.run({{"x", {DataType::kFLOAT, {4, 8, 10, 10}, x.data()}}});
  std::filesystem::resize_file(path, 0);  // as open(path, "wb") does
  {
    std::ofstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    const std::string junk(1000, 'j');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const auto after = exec.run({{"x", {DataType::kFLOAT, {4, 8, 10, 10}, x.data()}}});
  for (const char* name : {"y", "s"}) {
    ASSERT_EQ(before.at(name).nbytes, after.at(name).nbytes);
    EXPECT_EQ(std::memcmp(before.at(name).data.get(), after.at(name).data.get(), after.at(name).nbytes), 0) << name;
  }
  EXPECT_THROW(Engine::load(path), CorruptEngineError);  // the damaged file itself is refused
  std::filesystem::remove(path);
}

// `tensoracle inspect` on plans the runtime refuses: the same refusal, exit status 2, no
// crash (it segfaulted on a node with too few inputs, and exited 3 with a raw JSON exception
// when the target was an array).
#ifdef TENSORACLE_CLI_PATH
TEST_F(Hostile, InspectRefusesWhatTheLoaderRefuses) {
  const int product = node("product");
  const std::vector<std::pair<std::string, std::vector<std::byte>>> files = {
      {"matrix_multiply layers take 2", plan::write_engine_with(*plan, [&](nlohmann::json& j) { j["nodes"][product]["inputs"] = {0}; })},
      {"its target is not a JSON object", plan::write_engine_text(*plan, doc->dump(), "[1, 2]")},
      {"nested deeper than 64 levels", plan::write_engine_text(*plan, doc->dump(), std::string(100000, '[') + std::string(100000, ']'))},
  };
  const auto path = std::filesystem::temp_directory_path() / ("inspect_hostile_" + std::to_string(::getpid()) + ".engine");
  for (const auto& [what, file] : files) {
    tensoracle::testing::write_bytes(path, file);
    for (const char* json : {"", " --json"}) {
      std::string out;
      std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen((std::string(TENSORACLE_CLI_PATH) + " inspect " + path.string() + json + " 2>&1").c_str(), "r"), ::pclose);
      ASSERT_TRUE(pipe);
      char buf[4096];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
      const int status = ::pclose(pipe.release());
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << "status " << status << ": " << out;
      EXPECT_NE(out.find("error: [engine]"), std::string::npos) << out;
      EXPECT_NE(out.find(what), std::string::npos) << out;
    }
  }
  std::filesystem::remove(path);
}
#endif

}  // namespace
