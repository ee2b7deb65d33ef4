// The RMSNorm plugin (rmsnorm_plugin.cpp) in an engine, against the same network built from
// standard layers.
//
//   example_plugins_rmsnorm --plugin libtensoracle_example_plugins.so --dir DIR
//
// Opens (builds on the first run, reopens from DIR's cache on later runs) two CPU engines
// computing y = RMSNorm(x) * weight for x of shape (batch, 64), batch 1..8: "rmsnorm-plugin"
// with the plugin layer, "rmsnorm-layers" with elementwise/reduce/unary layers. Both run on the
// same inputs at batch 8 and 3; the outputs must agree within atol 1e-5 and rtol 1e-5. Prints
// how many engines were reopened; exits 1 when the outputs differ, 2 on an error.
#include <tensoracle/builder.h>
#include <tensoracle/cache.h>
#include <tensoracle/compare.h>
#include <tensoracle/engine.h>
#include <tensoracle/errors.h>
#include <tensoracle/network.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace tensoracle;

namespace {

constexpr std::int64_t kWidth = 64;
constexpr float kEpsilon = 0.25f;  // large enough that a plugin ignoring its field fails the comparison

// A small deterministic generator (xorshift64*), values in [-2, 2).
std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed ^= seed >> 12, seed ^= seed << 25, seed ^= seed >> 27;
    x = static_cast<float>((seed * 0x2545F4914F6CDD1Dull) >> 40) / static_cast<float>(1 << 24) * 4.f - 2.f;
  }
  return v;
}

const std::vector<float>& weight() {
  static const std::vector<float> w = values(kWidth, 7);
  return w;
}

Tensor* constant(Network& net, const std::vector<float>& v, const Dims& dims) {
  return net.add_constant(dims, Weights(DataType::kFLOAT, v.data(), static_cast<std::int64_t>(v.size()), nullptr))->get_output(0);
}

void plugin_graph(Network& net) {
  Tensor* x = net.add_input("x", DataType::kFLOAT, {-1, kWidth});
  Tensor* w = constant(net, weight(), {1, kWidth});
  Tensor* y = net.add_plugin("RMSNorm", "1", {x, w}, {PluginField::float32("epsilon", {kEpsilon})}, "tensoracle.examples")
                  ->get_output(0);
  y->set_name("y");
  net.mark_output(y);
}

void layers_graph(Network& net) {
  static const std::vector<float> eps{kEpsilon};
  Tensor* x = net.add_input("x", DataType::kFLOAT, {-1, kWidth});
  Tensor* w = constant(net, weight(), {1, kWidth});
  Tensor* sq = net.add_elementwise(x, x, ElementWiseOperation::kPROD)->get_output(0);
  Tensor* mean = net.add_reduce(sq, ReduceOperation::kAVG, 1u << 1, true)->get_output(0);
  Tensor* var = net.add_elementwise(mean, constant(net, eps, {1, 1}), ElementWiseOperation::kSUM)->get_output(0);
  Tensor* inv = net.add_unary(net.add_unary(var, UnaryOperation::kSQRT)->get_output(0), UnaryOperation::kRECIP)->get_output(0);
  Tensor* y = net.add_elementwise(net.add_elementwise(x, inv, ElementWiseOperation::kPROD)->get_output(0), w,
                                  ElementWiseOperation::kPROD)->get_output(0);
  y->set_name("y");
  net.mark_output(y);
}

std::vector<float> run(const Engine& engine, const std::vector<float>& x, std::int64_t batch) {
  Execution exec = engine.create_execution();
  auto out = exec.run({{"x", HostTensorView{DataType::kFLOAT, Dims{batch, kWidth}, x.data()}}});
  const HostTensor& y = out.at("y");
  std::vector<float> v(static_cast<std::size_t>(y.dims.volume()));
  std::memcpy(v.data(), y.data.get(), v.size() * sizeof(float));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir, plugin;
  std::string device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--plugin") plugin = argv[i + 1];
    else if (a == "--device") device = argv[i + 1];
  }
  if (dir.empty() || plugin.empty()) {
    std::fprintf(stderr, "usage: %s --plugin LIBRARY --dir DIR [--device cpu|cuda:N]\n", argv[0]);
    return 2;
  }
  try {
    EngineBuild decl;
    decl.inputs["x"] = InputShape::ranged({1, kWidth}, {4, kWidth}, {8, kWidth});
    decl.settings.optimization_level = 0;
    decl.settings.device = device;
    OpenOptions options;
    options.graph_version = "1";
    options.cache_dir = dir / "cache";
    options.io.inputs["x"] = {DataType::kFLOAT, {-1, kWidth}};
    options.io.outputs["y"] = {DataType::kFLOAT, {-1, kWidth}};
    options.name = "rmsnorm-plugin";
    options.plugins = {plugin};
    EngineHandle with_plugin = open_engine(plugin_graph, decl, options);
    options.name = "rmsnorm-layers";
    options.plugins.clear();
    EngineHandle with_layers = open_engine(layers_graph, decl, options);
    const int reopened = !with_plugin.built + !with_layers.built;
    std::printf("%d of 2 engines reopened from the cache, %d built\n", reopened, 2 - reopened);

    bool ok = true;
    for (std::int64_t batch : {8, 3}) {
      const auto x = values(static_cast<std::size_t>(batch * kWidth), 1000 + static_cast<std::uint64_t>(batch));
      const auto a = run(with_plugin.engine, x, batch), b = run(with_layers.engine, x, batch);
      CompareOptions copt;
      copt.atol = 1e-5;
      copt.rtol = 1e-5;
      const Dims shape{batch, kWidth};
      auto c = compare_outputs(ArrayView::of(a.data(), DataType::kFLOAT, shape), ArrayView::of(b.data(), DataType::kFLOAT, shape), copt);
      std::printf("batch %lld: max abs error %.3g, outside tolerance %llu\n", static_cast<long long>(batch),
                  c.max_absolute_error.value_or(NAN), static_cast<unsigned long long>(c.outside_tolerance_count.value_or(0)));
      ok = ok && c.outside_tolerance_count.value_or(1) == 0 && c.candidate_nonfinite_count == 0;
    }
    std::printf(ok ? "plugin and standard layers agree\n" : "plugin and standard layers DIFFER\n");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
