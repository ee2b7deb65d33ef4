// The reference's "Build bf16, int8, and fp8 engines" example as a C++ program: the same
// steps, fixture and limits as examples/precision/linear.py, with tensoracle's C++ API.
//
// A linear layer `features @ matrix + bias` is built from one graph function as fp32, bf16
// (casts), int8 and fp8 (quantize/dequantize with scales read from safetensors) and saved
// with open_engine under a name per precision. Each engine runs on caller-owned buffers; each
// lower precision is gated against the fp32 engine with compare_outputs using the reference
// test's limits (no NaN or inf, every element within atol with rtol 0, relative L2 error
// below the limit). The error table is printed; the exit status is 1 if a precision fails.
//
//   example_precision_linear [--dir DIR]    (DIR: the weights and the engine cache; a new
//                                            temporary folder by default)
//
// Run it twice with the same --dir: the second run reopens the four engines from the cache
// without calling the graph function. The fixture's random numbers are NumPy's
// default_rng(seed).uniform(...) (PCG64 seeded through SeedSequence), reproduced below, so
// both programs build the same engines and print the same table.
#include <tensoracle/builder.h>
#include <tensoracle/cache.h>
#include <tensoracle/compare.h>
#include <tensoracle/engine.h>
#include <tensoracle/errors.h>
#include <tensoracle/network.h>
#include <tensoracle/safetensors.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace st = tensoracle::safetensors;
using tensoracle::DataType;

namespace {

// ---- NumPy's default_rng(seed): SeedSequence(seed) -> PCG64 (XSL-RR 128/64) ---------------
class NumpyRandom {
 public:
  explicit NumpyRandom(std::uint32_t seed) {
    // SeedSequence: hash the entropy into a pool of four 32-bit words...
    std::uint32_t hash = 0x43b0d7e5;
    auto hashmix = [&](std::uint32_t v) {
      v ^= hash;
      hash *= 0x931e8875;
      v *= hash;
      return v ^ (v >> 16);
    };
    auto mix = [](std::uint32_t x, std::uint32_t y) {
      std::uint32_t r = 0xca01f9dd * x - 0x4973f715 * y;
      return r ^ (r >> 16);
    };
    std::array<std::uint32_t, 4> pool{};
    for (int i = 0; i < 4; ++i) pool[i] = hashmix(i == 0 ? seed : 0);
    for (int src = 0; src < 4; ++src)
      for (int dst = 0; dst < 4; ++dst)
        if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
    // ... then generate_state(4, uint64): the PCG64 state and increment.
    std::uint32_t hash_b = 0x8b51f9dd;
    std::array<std::uint64_t, 4> words{};
    for (int i = 0; i < 8; ++i) {
      std::uint32_t v = pool[i % 4] ^ hash_b;
      hash_b *= 0x58f38ded;
      v *= hash_b;
      v ^= v >> 16;
      words[i / 2] |= static_cast<std::uint64_t>(v) << (32 * (i % 2));
    }
    const U128 initial_state = (U128(words[0]) << 64) | words[1];
    increment_ = (((U128(words[2]) << 64) | words[3]) << 1) | 1;
    step();
    state_ += initial_state;
    step();
  }

  // Generator.uniform(low, high): low + (high - low) * (53 random bits / 2^53).
  double uniform(double low, double high) {
    step();
    const auto x = static_cast<std::uint64_t>(state_ >> 64) ^ static_cast<std::uint64_t>(state_);
    const auto rot = static_cast<unsigned>(state_ >> 122);
    const std::uint64_t bits = (x >> rot) | (x << ((64 - rot) & 63));
    return low + (high - low) * (static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0));
  }

  // `n` values as float32 (NumPy's .astype(np.float32): round to nearest).
  std::vector<float> uniform_f32(double low, double high, std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(uniform(low, high));
    return v;
  }

 private:
  __extension__ typedef unsigned __int128 U128;
  void step() {
    const U128 multiplier = (U128(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
    state_ = state_ * multiplier + increment_;
  }
  U128 state_ = 0, increment_ = 0;
};

// ---- the fixture --------------------------------------------------------------------------

const std::array<const char*, 4> kPrecisions = {"fp32", "bf16", "int8", "fp8"};

struct Limit {
  double atol, l2;
};
const std::map<std::string, Limit> kLimits = {{"bf16", {0.01, 0.01}}, {"int8", {0.02, 0.02}}, {"fp8", {0.12, 0.08}}};

std::vector<float> features() { return NumpyRandom(11).uniform_f32(-1, 1, 16 * 32); }

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

// fp32 weights and positive fp32 scales in one safetensors file.
void write_weights(const fs::path& path) {
  NumpyRandom rng(29);
  const std::vector<float> matrix = rng.uniform_f32(-0.25, 0.25, 32 * 16);
  const std::vector<float> bias = rng.uniform_f32(-0.1, 0.1, 16);
  std::vector<std::vector<float>> scales;
  std::vector<st::TensorData> tensors = {{"matrix", st::Dtype::F32, {32, 16}, bytes_of(matrix)},
                                         {"bias", st::Dtype::F32, {1, 16}, bytes_of(bias)}};
  scales.reserve(4);
  for (auto [precision, maximum] : {std::pair{"int8", 127.0f}, std::pair{"fp8", 448.0f}}) {
    scales.push_back({max_abs(features()) / maximum});
    tensors.push_back({std::string(precision) + ".input_scale", st::Dtype::F32, {1}, bytes_of(scales.back())});
    scales.push_back({max_abs(matrix) / maximum});
    tensors.push_back({std::string(precision) + ".weight_scale", st::Dtype::F32, {1}, bytes_of(scales.back())});
  }
  st::save_file(path, tensors);
}

// ---- the graph function: the reference's, in C++ -------------------------------------------

tensoracle::GraphFunction graph(const fs::path& path, const std::string& precision) {
  return [=](tensoracle::Network& network) {
    const st::File weights = st::File::open(path);
    auto constant = [&](const std::string& name) {
      const st::TensorInfo& info = weights.at(name);
      std::span<const float> values = weights.view(info).as<float>();
      tensoracle::Dims dims(std::span<const std::int64_t>(info.shape));
      // Copied: the weights outlive the mapped file.
      auto w = tensoracle::Weights::copy_of(DataType::kFLOAT, values.data(), static_cast<std::int64_t>(values.size()));
      return network.add_constant(dims, w)->get_output(0);
    };
    tensoracle::Tensor* features = network.add_input("features", DataType::kFLOAT, {16, 32});
    tensoracle::Tensor* matrix = constant("matrix");
    tensoracle::Tensor* bias = constant("bias");
    if (precision == "bf16") {
      features = network.add_cast(features, DataType::kBF16)->get_output(0);
      matrix = network.add_cast(matrix, DataType::kBF16)->get_output(0);
      bias = network.add_cast(bias, DataType::kBF16)->get_output(0);
    } else if (precision == "int8" || precision == "fp8") {
      const DataType quantized_type = precision == "int8" ? DataType::kINT8 : DataType::kFP8;
      auto qdq = [&](tensoracle::Tensor* tensor, const std::string& key) {
        tensoracle::Tensor* scale = constant(precision + "." + key + "_scale");
        tensoracle::Tensor* quantized = network.add_quantize(tensor, scale, quantized_type)->get_output(0);
        return network.add_dequantize(quantized, scale, DataType::kFLOAT)->get_output(0);
      };
      features = qdq(features, "input");
      matrix = qdq(matrix, "weight");
    }
    tensoracle::Tensor* value =
        network.add_matrix_multiply(features, tensoracle::MatrixOperation::kNONE, matrix,
                                    tensoracle::MatrixOperation::kNONE)->get_output(0);
    value = network.add_elementwise(value, bias, tensoracle::ElementWiseOperation::kSUM)->get_output(0);
    if (precision == "bf16") value = network.add_cast(value, DataType::kFLOAT)->get_output(0);
    value->set_name("result");
    network.mark_output(value);
  };
}

// Built and saved on the first call; reopened from the cache afterwards.
tensoracle::EngineHandle open_linear(const fs::path& folder, const std::string& precision) {
  tensoracle::EngineBuild declaration;
  declaration.inputs["features"] = tensoracle::InputShape::fixed({16, 32});
  declaration.settings.optimization_level = 0;
  tensoracle::OpenOptions options;
  options.name = "linear-";  // one weight file serves all four: the name tells them apart
  options.name += precision;
  options.graph_version = "1";
  options.weights = {folder / "linear.safetensors"};
  options.io.inputs["features"] = {DataType::kFLOAT, {16, 32}};
  options.io.outputs["result"] = {DataType::kFLOAT, {16, 16}};
  options.cache_dir = folder / "cache";
  return tensoracle::open_engine(graph(folder / "linear.safetensors", precision), declaration, options);
}

// Runs the engine on caller-owned buffers.
std::vector<float> run(const tensoracle::EngineHandle& handle, std::vector<float>& input) {
  std::vector<float> result(16 * 16);
  tensoracle::Execution execution = handle.create_execution();
  execution.set_input_shape("features", {16, 32});
  execution.set_tensor_address("features", input.data());
  execution.set_tensor_address("result", result.data());
  execution.enqueue();  // the CPU backend: done when enqueue returns
  return result;
}

std::string g3(double v) {  // Python's format(v, "g") with 3 significant digits
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path folder;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      folder = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--dir DIR]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (folder.empty()) {
      std::string pattern = (fs::temp_directory_path() / "tensoracle-linear-XXXXXX").string();
      if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot create a temporary folder");
      folder = pattern;
    }
    fs::create_directories(folder);
    if (!fs::exists(folder / "linear.safetensors")) write_weights(folder / "linear.safetensors");

    std::vector<float> input = features();
    std::map<std::string, std::vector<float>> outputs;
    int reopened = 0;
    for (const char* precision : kPrecisions) {
      tensoracle::EngineHandle handle = open_linear(folder, precision);
      std::printf("%s %-4s engine %s\n", handle.built ? "built" : "found", precision,
                  handle.path.filename().string().c_str());
      reopened += !handle.built;
      outputs[precision] = run(handle, input);
    }
    // The graph function ran only for the engines built here.
    std::printf("%d of %zu engines reopened from the cache, %zu built\n\n", reopened, kPrecisions.size(),
                kPrecisions.size() - static_cast<std::size_t>(reopened));

    std::printf("%-9s  %13s  %11s  %8s  %7s  %5s  %8s  result\n", "candidate", "max abs error", "relative L2",
                "cosine", "outside", "atol", "L2 limit");
    bool all_accepted = true;
    for (const char* precision : {"bf16", "int8", "fp8"}) {
      const Limit limit = kLimits.at(precision);
      tensoracle::CompareOptions options;
      options.atol = limit.atol;
      options.rtol = 0.0;
      tensoracle::OutputComparison c =
          tensoracle::compare_outputs(tensoracle::ArrayView::of(outputs[precision].data(), {16, 16}),
                                      tensoracle::ArrayView::of(outputs["fp32"].data(), {16, 16}), options);
      const bool accepted = c.candidate_nonfinite_count == 0 && c.reference_nonfinite_count == 0 &&
                            c.outside_tolerance_count == 0 && c.relative_l2_error && *c.relative_l2_error < limit.l2;
      all_accepted = all_accepted && accepted;
      std::printf("%-9s  %13s  %11s  %8.6f  %7lld  %5s  %8s  %s\n", precision, g3(*c.max_absolute_error).c_str(),
                  g3(*c.relative_l2_error).c_str(), *c.cosine_similarity,
                  static_cast<long long>(*c.outside_tolerance_count), g3(limit.atol).c_str(), g3(limit.l2).c_str(),
                  accepted ? "accepted" : "REJECTED");
    }
    std::printf("\n%s\n", all_accepted ? "all lower precisions accepted" : "some lower precision is outside the limits");
    return all_accepted ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
