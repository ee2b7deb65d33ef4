// Plugins: the loader and registry, plugin layers in networks, engines and the CPU runtime, and
// what misbehaving libraries and plugins do (a clear error, never a crash). The libraries are
// built beside this test: the example (RMSNorm), tests/plugins/test_plugins.cpp and two C
// libraries (no getCreators; wrong ABI versions).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/cache.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

using namespace tensoracle;
using tensoracle::testing::read_bytes;
using tensoracle::testing::TempDir;
using tensoracle::testing::uniform;
using tensoracle::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

const fs::path kExample = TENSORACLE_EXAMPLE_PLUGINS;
const fs::path kTests = TENSORACLE_TEST_PLUGINS;
const fs::path kRewritten = TENSORACLE_TEST_PLUGINS_REWRITTEN;  // loaded by one test only
const fs::path kNoCreators = TENSORACLE_TEST_PLUGIN_NO_CREATORS;
const fs::path kBadCreatorAbi = TENSORACLE_TEST_PLUGIN_BAD_CREATOR_ABI;
const fs::path kBadPluginAbi = TENSORACLE_TEST_PLUGIN_BAD_PLUGIN_ABI;
constexpr const char* kNs = "tensoracle.tests";

// The message of what `f` throws as E (fails the test when it throws nothing or another class).
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another class: " << e.what();
    return {};
  }
  ADD_FAILURE() << "threw nothing";
  return {};
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

void append(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::app);
  f << bytes;
}

EngineBuild fixed(const std::string& name, const Dims& dims) {
  EngineBuild d;
  d.inputs[name] = InputShape::fixed(dims);
  d.settings.device = "cpu";
  d.settings.optimization_level = 0;
  return d;
}

std::vector<float> run1(const Engine& e, const std::string& in, const std::vector<float>& x, const Dims& dims,
                        const std::string& out) {
  auto exec = e.create_execution();
  auto r = exec.run({{in, HostTensorView{DataType::kFLOAT, dims, x.data()}}});
  const auto& t = r.at(out);
  std::vector<float> v(static_cast<std::size_t>(t.dims.volume()));
  std::memcpy(v.data(), t.data.get(), v.size() * 4);
  return v;
}

// A network of one plugin layer over input x.
GraphFunction one_plugin(const std::string& name, const std::string& version, const Dims& dims,
                         std::vector<PluginField> fields = {}) {
  return [=](Network& net) {
    Tensor* x = net.add_input("x", DataType::kFLOAT, dims);
    Tensor* y = net.add_plugin(name, version, {x}, fields, kNs)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
}

class Plugins : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { load_plugin_libraries({kExample, kTests}); }
  TempDir tmp;
};

// ---- the loader ---------------------------------------------------------------------------

TEST_F(Plugins, LoadingRegistersTheCreatorsWithTheirSchema) {
  auto info = load_plugin_library(kExample);
  EXPECT_EQ(info.path, fs::canonical(kExample));
  EXPECT_EQ(info.size, fs::file_size(kExample));
  EXPECT_EQ(info.digest.rfind("xxh3-128:", 0), 0u) << info.digest;
  EXPECT_EQ(info.digest.size(), 9u + 32u);
  ASSERT_EQ(info.creators, std::vector<std::string>{"tensoracle.examples::RMSNorm/1"});
  bool found = false;
  for (const auto& c : registered_plugin_creators())
    if (c.name == "RMSNorm") {
      found = true;
      EXPECT_EQ(c.plugin_namespace, "tensoracle.examples");
      ASSERT_EQ(c.fields.size(), 1u);
      EXPECT_EQ(c.fields[0].name, "epsilon");
      EXPECT_EQ(c.fields[0].type, PluginFieldType::kFLOAT32);
      EXPECT_EQ(c.fields[0].count, 1);
      EXPECT_EQ(c.library, fs::canonical(kExample));
    }
  EXPECT_TRUE(found);
}

TEST_F(Plugins, TheSameLibraryTwiceOrUnderAnotherNameRegistersOnce) {
  const auto before = registered_plugin_creators().size();
  auto a = load_plugin_library(kExample);
  auto b = load_plugin_library(kExample);
  const fs::path copy = tmp.path / "copy.so";
  fs::copy_file(kExample, copy);
  auto c = load_plugin_library(copy);  // the same bytes: the same library, not a duplicate
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.digest, c.digest);
  EXPECT_EQ(registered_plugin_creators().size(), before);
}

TEST_F(Plugins, MissingUnreadableAndForeignFilesArePluginLibraryErrors) {
  auto m = message_of<PluginLibraryError>([&] { load_plugin_library(tmp.path / "libmissing.so"); });
  EXPECT_HAS(m, "libmissing.so");
  EXPECT_HAS(m, "No such file");
  m = message_of<PluginLibraryError>([&] { load_plugin_library(tmp.path); });
  EXPECT_HAS(m, "not a regular file");
  const fs::path text = tmp.path / "libtext.so";
  write_bytes(text, std::vector<std::byte>(64, std::byte{'x'}));
  m = message_of<PluginLibraryError>([&] { load_plugin_library(text); });
  EXPECT_HAS(m, "libtext.so");
  EXPECT_HAS(m, "cannot load the plugin library");
  if (::geteuid() != 0) {  // root reads any file
    const fs::path locked = tmp.path / "liblocked.so";
    fs::copy_file(kExample, locked);
    fs::permissions(locked, fs::perms::none);
    m = message_of<PluginLibraryError>([&] { load_plugin_library(locked); });
    EXPECT_HAS(m, "liblocked.so");
    EXPECT_HAS(m, "Permission denied");
  }
}

TEST_F(Plugins, ALibraryWithoutGetCreatorsIsRefused) {
  auto m = message_of<PluginLibraryError>([&] { load_plugin_library(kNoCreators); });
  EXPECT_HAS(m, kNoCreators.filename().string());
  EXPECT_HAS(m, "does not export getCreators");
}

TEST_F(Plugins, ACreatorOfAnotherAbiVersionIsRefused) {
  const auto before = registered_plugin_creators().size();
  auto m = message_of<PluginLibraryError>([&] { load_plugin_library(kBadCreatorAbi); });
  EXPECT_HAS(m, kBadCreatorAbi.filename().string());
  EXPECT_HAS(m, "ABI version 42");
  EXPECT_EQ(registered_plugin_creators().size(), before) << "nothing of a refused library is registered";
}

TEST_F(Plugins, APluginOfAnotherAbiVersionIsRefusedWhenTheLayerIsAdded) {
  load_plugin_library(kBadPluginAbi);
  Network net;
  Tensor* x = net.add_input("x", DataType::kFLOAT, {4});
  auto m = message_of<PluginLibraryError>([&] { net.add_plugin("BadPluginAbi", "1", {x}, {}, "tensoracle.tests.c"); });
  EXPECT_HAS(m, "layer 'plugin_1'");
  EXPECT_HAS(m, "ABI version 7");
  EXPECT_EQ(net.num_layers(), 1);
}

TEST_F(Plugins, AnotherLibraryWithTheSameCreatorIsRefusedNamingBothFiles) {
  const fs::path other = tmp.path / "libother.so";
  fs::copy_file(kExample, other);
  append(other, "other bytes");  // another library (other digest) that registers RMSNorm/1 too
  auto m = message_of<PluginLibraryError>([&] { load_plugin_library(other); });
  EXPECT_HAS(m, "libother.so");
  EXPECT_HAS(m, fs::canonical(kExample).string());
  EXPECT_HAS(m, "tensoracle.examples::RMSNorm/1");
}

TEST_F(Plugins, ALibraryChangedOnDiskAfterLoadingIsRefused) {
  const fs::path lib = tmp.path / "libchanging.so";
  fs::copy_file(kExample, lib);
  load_plugin_library(lib);  // an alias of the example (same bytes)
  load_plugin_library(lib);
  append(lib, "appended later");
  auto m = message_of<PluginLibraryError>([&] { load_plugin_library(lib); });
  EXPECT_HAS(m, "libchanging.so");
  EXPECT_HAS(m, "changed on disk after it was loaded");
  // Replaced by rename (another inode), same size but other bytes: refused too.
  const fs::path lib2 = tmp.path / "libreplaced.so";
  fs::copy_file(kExample, lib2);
  load_plugin_library(lib2);
  auto bytes = read_bytes(lib2);
  bytes.back() = std::byte(static_cast<unsigned>(bytes.back()) ^ 0xFF);
  write_bytes(tmp.path / "next.so", bytes);
  fs::rename(tmp.path / "next.so", lib2);
  m = message_of<PluginLibraryError>([&] { load_plugin_library(lib2); });
  EXPECT_HAS(m, "changed on disk after it was loaded");
}

// A library rewritten in place after loading (`cp new.so lib.so`: the same inode, truncated and
// written; here with int3 bytes) must not change the code the process runs: its plugins keep
// working and the process exits normally. In a child process, so that a crash is seen as one.
TEST_F(Plugins, ALibraryRewrittenInPlaceAfterLoadingKeepsRunning) {
  const fs::path lib = tmp.path / "librewritten.so";
  fs::copy_file(kRewritten, lib);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      const auto start = std::chrono::steady_clock::now();
      load_plugin_library(lib);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "loaded %s (%ju bytes) in %.2f ms\n", lib.c_str(), static_cast<std::uintmax_t>(fs::file_size(lib)), ms);
      {
        std::ofstream f(lib, std::ios::binary | std::ios::trunc);
        f << std::string(static_cast<std::size_t>(fs::file_size(kRewritten)), '\xCC');
      }
      Network net;
      Tensor* x = net.add_input("x", DataType::kFLOAT, {2, 3});
      PluginLayer* layer = net.add_plugin("MinMax", "1", {x}, {}, "tensoracle.tests.rewritten");
      if (layer->num_outputs() != 2 || layer->get_output(0)->dims() != Dims{2, 1}) code = 20;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 21;
    }
    std::exit(code);  // a normal exit: static destructors and the library's finalizers run
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the child died of signal " << WTERMSIG(status);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "20: wrong output dims, 21: an exception (printed above)";
}

// ---- plugin layers in a network ------------------------------------------------------------

TEST_F(Plugins, AnUnregisteredCreatorIsAnInvalidArgumentNamingItAndPlugins) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFLOAT, {4});
  auto m = message_of<InvalidArgument>([&] { net.add_plugin("Nope", "3", {x}, {}, "some.ns"); });
  EXPECT_HAS(m, "layer 'plugin_1'");
  EXPECT_HAS(m, "some.ns::Nope/3");
  EXPECT_HAS(m, "plugins=");
}

TEST_F(Plugins, FieldsAreCheckedAgainstTheSchema) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFLOAT, {4});
  auto add = [&](std::vector<PluginField> f) { net.add_plugin("Echo", "2", {x}, f, kNs); };
  EXPECT_HAS(message_of<InvalidArgument>([&] { add({PluginField::int32("nope", {1})}); }), "unknown field 'nope'");
  EXPECT_HAS(message_of<InvalidArgument>([&] { add({PluginField::float32("i32", {1})}); }), "field 'i32' is float32");
  EXPECT_HAS(message_of<InvalidArgument>([&] { add({PluginField::int64("i64", {1, 2, 3})}); }), "has 3 elements");
  EXPECT_HAS(message_of<InvalidArgument>([&] { add({PluginField::int32("i32", {1}), PluginField::int32("i32", {2})}); }),
             "given twice");
  EXPECT_EQ(net.num_layers(), 1);
}

TEST_F(Plugins, ACreatorThatThrowsIsAnErrorNamingTheLayerAndThePlugin) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFLOAT, {4});
  auto m = message_of<InvalidArgument>([&] { net.add_plugin("Throws", "1", {x}, {}, kNs); });
  EXPECT_HAS(m, "layer 'plugin_1'");
  EXPECT_HAS(m, "tensoracle.tests::Throws/1");
  EXPECT_HAS(m, "boom from the creator");
}

TEST_F(Plugins, InvalidShapesFromAPluginAreErrorsNamingTheLayer) {
  const char* expected[] = {"dimension 0 is negative", "has rank 9", "is -1 although every input dim is known",
                            "type 42", "shape function exploded"};
  for (int mode = 0; mode < 5; ++mode) {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFLOAT, {4, 3});
    auto m = message_of<InvalidArgument>(
        [&] { net.add_plugin("BadShapes", "1", {x}, {PluginField::int32("mode", {mode})}, kNs); });
    EXPECT_HAS(m, "layer 'plugin_1'");
    EXPECT_HAS(m, "BadShapes");
    EXPECT_HAS(m, expected[mode]);
  }
  // -1 for a dynamic input passes when the layer is added, and fails once the builder knows
  // the shapes.
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1, 3}, {2, 3}, {4, 3});
  d.settings.device = "cpu";
  auto m = message_of<InvalidArgument>(
      [&] { build_serialized_engine(one_plugin("BadShapes", "1", {-1, 3}, {PluginField::int32("mode", {2})}), d); });
  EXPECT_HAS(m, "plugin_1");
  EXPECT_HAS(m, "although every input dim is known");
  // Refused inputs (the plugin's own checks).
  Network net;
  Tensor* i = net.add_input("i", DataType::kINT32, {4});
  EXPECT_HAS(message_of<InvalidArgument>([&] { net.add_plugin("MinMax", "1", {i}, {}, kNs); }), "inputs must be float32");
}

// ---- engines --------------------------------------------------------------------------------

TEST_F(Plugins, RmsNormMatchesAReferenceAndReopensFromItsFields) {
  const std::vector<float> w = uniform(8, -1.f, 1.f, 3);
  auto graph = [&](Network& net) {
    Tensor* x = net.add_input("x", DataType::kFLOAT, {-1, 8});
    Tensor* wt = net.add_constant({8}, Weights(DataType::kFLOAT, w.data(), 8, nullptr))->get_output(0);
    Tensor* y = net.add_plugin("RMSNorm", "1", {x, wt}, {PluginField::float32("epsilon", {0.5f})}, "tensoracle.examples")
                    ->get_output(0);
    y->set_name("y");
    net.mark_output(y);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1, 8}, {2, 8}, {5, 8});
  d.settings.device = "cpu";
  auto bytes = build_serialized_engine(graph, d, {kExample});
  Engine e = Engine::deserialize(bytes);
  const auto x = uniform(3 * 8, -2.f, 2.f, 9);
  const auto y = run1(e, "x", x, {3, 8}, "y");
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int i = 0; i < 8; ++i) ss += double(x[r * 8 + i]) * x[r * 8 + i];
    const double scale = 1 / std::sqrt(ss / 8 + 0.5);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[r * 8 + i], x[r * 8 + i] * scale * w[i], 1e-5) << r << "," << i;
  }
  // The plan stores the creator and the fields, not code.
  const std::string plan = e.plan_json();
  EXPECT_HAS(plan, "\"creator\":\"RMSNorm\"");
  EXPECT_HAS(plan, "\"namespace\":\"tensoracle.examples\"");
  EXPECT_HAS(plan, "\"data\":\"0000003f\"");  // 0.5f, little-endian
}

TEST_F(Plugins, EveryFieldTypeSurvivesTheEngineFile) {
  std::vector<std::byte> blob{std::byte{1}, std::byte{2}, std::byte{250}};
  std::vector<PluginField> fields{PluginField::int32("i32", {3, -1, 40}), PluginField::int64("i64", {1ll << 40, -(1ll << 40) + 5}),
                                  PluginField::float32("f32", {0.25f, 0.5f}), PluginField::float64("f64", {-1.5}),
                                  PluginField::string("text", "hi there"), PluginField::bytes("blob", blob)};
  auto bytes = build_serialized_engine(one_plugin("Echo", "2", {2}, fields), fixed("x", {2}));
  Engine e = Engine::deserialize(bytes);
  const auto y = run1(e, "x", {7.f, 8.f}, {2}, "y");
  ASSERT_EQ(y.size(), 8u);
  EXPECT_EQ(y[0], 7.f);
  EXPECT_EQ(y[1], 8.f);
  EXPECT_EQ(y[2], 42.f);
  EXPECT_EQ(y[3], 5.f);
  EXPECT_EQ(y[4], 0.75f);
  EXPECT_EQ(y[5], -1.5f);
  EXPECT_EQ(y[6], 8 * 1000.f + 'h');
  EXPECT_EQ(y[7], 253.f);
}

// A plugin of several outputs is one node that writes them all in one call, whichever of them
// the network reads (the others stay in the arena).
TEST_F(Plugins, AMultiOutputPluginRunsOnceForAllItsOutputs) {
  auto graph = [](bool both) {
    return [both](Network& net) {
      Tensor* x = net.add_input("x", DataType::kFLOAT, {3, 4});
      auto* l = net.add_plugin("MinMax", "1", {x}, {}, kNs);
      EXPECT_EQ(l->num_outputs(), 2);
      EXPECT_EQ(l->get_output(1)->dims(), (Dims{3, 1}));
      l->get_output(1)->set_name("max");
      net.mark_output(l->get_output(1));
      if (both) {
        l->get_output(0)->set_name("min");
        net.mark_output(l->get_output(0));
      }
    };
  };
  const std::vector<float> x{1, -2, 3, 0, 5, 5, 5, 5, -1, -7, 2, 9};
  Engine both = Engine::deserialize(build_serialized_engine(graph(true), fixed("x", {3, 4})));
  Engine max_only = Engine::deserialize(build_serialized_engine(graph(false), fixed("x", {3, 4})));
  ASSERT_EQ(both.layers().size(), 1u);
  ASSERT_EQ(max_only.layers().size(), 1u);
  EXPECT_EQ(both.layers()[0].outputs, (std::vector<std::string>{"min", "max"}));
  EXPECT_EQ(both.layers()[0].output, "min");
  EXPECT_EQ(max_only.layers()[0].outputs.size(), 2u);
  EXPECT_EQ(max_only.layers()[0].outputs[1], "max");
  // The plugin appends a byte per run to the file this names.
  const fs::path log = tmp.path / "minmax-runs";
  setenv("TENSORACLE_TESTS_MINMAX_RUNS", log.c_str(), 1);
  auto exec = both.create_execution();
  auto r = exec.run({{"x", HostTensorView{DataType::kFLOAT, {3, 4}, x.data()}}});
  unsetenv("TENSORACLE_TESTS_MINMAX_RUNS");
  ASSERT_TRUE(fs::exists(log));
  EXPECT_EQ(fs::file_size(log), 1u) << "one call for both outputs";
  std::vector<float> mn(3), mx(3);
  std::memcpy(mn.data(), r.at("min").data.get(), 12);
  std::memcpy(mx.data(), r.at("max").data.get(), 12);
  EXPECT_EQ(mn, (std::vector<float>{-2, 5, -7}));
  EXPECT_EQ(mx, (std::vector<float>{3, 5, 9}));
  EXPECT_EQ(run1(max_only, "x", x, {3, 4}, "max"), (std::vector<float>{3, 5, 9}));
}

TEST_F(Plugins, APluginWithoutACpuImplementationIsABuildErrorNamingLayerAndBackend) {
  auto m = message_of<BuildError>([&] { build_serialized_engine(one_plugin("CudaOnly", "1", {4}), fixed("x", {4})); });
  EXPECT_HAS(m, "layer 'plugin_1'");
  EXPECT_HAS(m, "CudaOnly");
  EXPECT_HAS(m, "no CPU implementation");
  EXPECT_HAS(m, "cpu");
}

TEST_F(Plugins, APluginFailingAtRunTimeIsAnErrorNamingLayerAndPlugin) {
  Engine e = Engine::deserialize(build_serialized_engine(one_plugin("FailsAtRun", "1", {4}), fixed("x", {4})));
  auto m = message_of<Error>([&] { run1(e, "x", {1, 2, 3, 4}, {4}, "y"); });
  EXPECT_HAS(m, "layer 'plugin_1'");
  EXPECT_HAS(m, "FailsAtRun");
  EXPECT_HAS(m, "the kernel failed on purpose");
}

TEST_F(Plugins, AWorkspaceThatGrowsWhenShapesShrinkIsRefusedAtRunTime) {
  EngineBuild d;
  d.inputs["x"] = InputShape::ranged({1}, {64}, {4096});
  d.settings.device = "cpu";
  Engine e = Engine::deserialize(build_serialized_engine(one_plugin("Grows", "1", {-1}), d));
  EXPECT_EQ(run1(e, "x", std::vector<float>(4096, 1.f), {4096}, "y").size(), 4096u);
  auto m = message_of<InvalidArgument>([&] { run1(e, "x", {1.f}, {1}, "y"); });
  EXPECT_HAS(m, "plugin_1");
  EXPECT_HAS(m, "scratch");
}

// ---- engine files that name plugins ---------------------------------------------------------

TEST_F(Plugins, AnEngineNeedingAnUnregisteredCreatorNamesItAndSaysPlugins) {
  auto bytes = build_serialized_engine(one_plugin("Echo", "2", {2}), fixed("x", {2}));
  plan::Plan p = plan::read_engine(bytes, "test", nullptr);
  auto edited = plan::write_engine_with(p, [](nlohmann::json& j) {
    for (auto& n : j["nodes"])
      if (n["layer"] == "plugin") n["params"]["creator"] = "Unknown";
  });
  auto m = message_of<PluginLibraryError>([&] { Engine::deserialize(edited); });
  EXPECT_HAS(m, "layer 'plugin_1'");
  EXPECT_HAS(m, "tensoracle.tests::Unknown/2");
  EXPECT_HAS(m, "plugins=");
}

TEST_F(Plugins, CorruptPluginFieldsInAnEngineAreCorruptEngineErrors) {
  auto bytes = build_serialized_engine(one_plugin("Echo", "2", {2}, {PluginField::int32("i32", {5}), PluginField::string("text", "ab")}),
                                       fixed("x", {2}));
  plan::Plan p = plan::read_engine(bytes, "test", nullptr);
  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<std::string, Edit>> edits = {
      {"odd length", [](nlohmann::json& f) { f[0]["data"] = "050"; }},
      {"not hex", [](nlohmann::json& f) { f[0]["data"] = "zz000000"; }},
      {"upper-case hex", [](nlohmann::json& f) { f[0]["data"] = "0A000000"; }},
      {"unknown type", [](nlohmann::json& f) { f[0]["type"] = "complex64"; }},
      {"partial element", [](nlohmann::json& f) { f[0]["data"] = "050000"; }},
      {"not an array", [](nlohmann::json& f) { f = nlohmann::json::object(); }},
      {"missing data", [](nlohmann::json& f) { f[1].erase("data"); }},
      {"extra key", [](nlohmann::json& f) { f[1]["extra"] = 1; }},
      {"number data", [](nlohmann::json& f) { f[1]["data"] = 5; }},
      {"null entry", [](nlohmann::json& f) { f[1] = nullptr; }},
  };
  for (const auto& [what, edit] : edits) {
    auto edited = plan::write_engine_with(p, [&](nlohmann::json& j) {
      for (auto& n : j["nodes"])
        if (n["layer"] == "plugin") edit(n["params"]["fields"]);
    });
    EXPECT_THROW(Engine::deserialize(edited), CorruptEngineError) << what;
  }
  // A schema violation in a well-formed file (the wrong count for i64): the library refuses it.
  auto wrong = plan::write_engine_with(p, [](nlohmann::json& j) {
    for (auto& n : j["nodes"])
      if (n["layer"] == "plugin") n["params"]["fields"][0] = {{"name", "i64"}, {"type", "int64"}, {"data", "0100000000000000"}};
  });
  EXPECT_HAS(message_of<PluginLibraryError>([&] { Engine::deserialize(wrong); }), "has 1 elements");
}

#ifdef TENSORACLE_CLI_PATH
TEST_F(Plugins, InspectShowsAPluginEngineWithoutItsLibrary) {
  const fs::path engine = tmp.path / "echo.engine";
  write_bytes(engine, build_serialized_engine(one_plugin("Echo", "2", {2}), fixed("x", {2})));
  const fs::path out = tmp.path / "out.txt";
  const std::string cmd = std::string(TENSORACLE_CLI_PATH) + " inspect " + engine.string() + " > " + out.string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream f(out);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_HAS(text, "plugin_1");
  EXPECT_HAS(text, "creator tensoracle.tests::Echo/2");
}
#endif

// ---- open_engine ----------------------------------------------------------------------------

TEST_F(Plugins, OpenEngineLoadsPluginsFirstAndHashesThemIntoTheIdentity) {
  EngineBuild d = fixed("x", {2});
  OpenOptions o;
  o.name = "echo";
  o.graph_version = "1";
  o.cache_dir = tmp.path / "cache";
  o.io.inputs["x"] = {DataType::kFLOAT, {2}};
  o.io.outputs["y"] = {DataType::kFLOAT, {8}};
  o.plugins = {kTests};
  auto graph = one_plugin("Echo", "2", {2}, {PluginField::float32("f32", {2.5f})});
  auto built = open_engine(graph, d, o);
  auto again = open_engine(graph, d, o);
  EXPECT_TRUE(built.built);
  EXPECT_FALSE(again.built);
  EXPECT_EQ(run1(again.engine, "x", {1, 2}, {2}, "y")[4], 2.5f);
  const auto id = engine_identity(d, o);
  EXPECT_HAS(id.text, load_plugin_library(kTests).digest);
  o.plugins = {kTests, kExample};
  EXPECT_NE(engine_identity(d, o).identity, id.identity);
  o.plugins = {tmp.path / "libmissing.so"};
  EXPECT_HAS(message_of<PluginLibraryError>([&] { open_engine(graph, d, o); }), "libmissing.so");
}

}  // namespace
